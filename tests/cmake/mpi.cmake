# The MPI tests: every plan across 4 ranks under mpirun, faults, and
# the Python module beside mpi4py. Registered when the build has MPI; the
# script reports "skipped" (77) when mpirun is absent.
if(LADE_HAVE_MPI)
  add_executable(mpi_check ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mpi_check.c)
  target_link_libraries(mpi_check PRIVATE lade_static MPI::MPI_C)
  target_compile_definitions(mpi_check PRIVATE _GNU_SOURCE)
  add_test(NAME mpi COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_mpi.sh $<TARGET_FILE:mpi_check>
           $<TARGET_FILE:lade_cli> ${CMAKE_CURRENT_BINARY_DIR}/tmp/mpi)
  set_tests_properties(mpi PROPERTIES LABELS integration TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python")
endif()
