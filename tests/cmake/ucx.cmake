# The UCX transport's tests: every plan across 4 processes with the
# addresses exchanged through a rendezvous folder, under torchrun (C and the
# Python module with a gloo process group), and the failure cases; no
# mpirun. Registered when the build has UCX; the script reports "skipped"
# (77) only when torch is missing.
if(LADE_HAVE_UCX)
  add_executable(ucx_check ${CMAKE_CURRENT_SOURCE_DIR}/ucx/ucx_check.c)
  target_link_libraries(ucx_check PRIVATE lade_static)
  target_compile_definitions(ucx_check PRIVATE _GNU_SOURCE)
  add_test(NAME ucx COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ucx/test_ucx.sh $<TARGET_FILE:ucx_check>
           $<TARGET_FILE:lade_cli> ${CMAKE_CURRENT_BINARY_DIR}/tmp/ucx)
  set_tests_properties(ucx PROPERTIES LABELS integration TIMEOUT 1500 SKIP_RETURN_CODE 77
                       ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python"
                       RESOURCE_LOCK torchrun) # torchrun --standalone's fixed port 29400 (python.cmake)
  # A hostile world (issue 29): junk in the rendezvous folder, ranks that never
  # come, a loader failing before the transport, messages for closed loaders
  # (tests/ucx/test_hostile_transport.py; ucx_hostile.c drives the transport's
  # own interface for the last).
  add_executable(ucx_hostile ${CMAKE_CURRENT_SOURCE_DIR}/ucx/ucx_hostile.c)
  target_include_directories(ucx_hostile PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ucx_hostile PRIVATE lade_static)
  target_compile_definitions(ucx_hostile PRIVATE _GNU_SOURCE)
  if(TARGET lade_python AND LADE_PYTHON3)
    add_test(NAME ucx_hostile COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/pytest.sh
             ${CMAKE_CURRENT_SOURCE_DIR}/ucx/test_hostile_transport.py WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(ucx_hostile PROPERTIES LABELS "python;integration" TIMEOUT 900
                         ENVIRONMENT "LADE_BUILD=${CMAKE_BINARY_DIR};LADE_PYTHON3=${LADE_PYTHON3}")
  endif()
else()
  add_test(NAME ucx COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: this build has no UCX (LADE_WITH_UCX; apt-get install libucx-dev)")
  set_tests_properties(ucx PROPERTIES LABELS integration SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
