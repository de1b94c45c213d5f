# Python module tests (pytest), registered when the module is built: one ctest
# entry per tests/python/test_*.py, named python_<file> without test_
# (`ctest -R python_tar`, `ctest -L python`). scripts/pytest.sh sets their
# environment (PYTHONPATH, LADE_CLI, the ASan preload), the same script a person
# runs for one file: `bash scripts/pytest.sh tests/python/test_tar.py -k NAME`.
if(TARGET lade_python AND LADE_PYTHON3)
  set(_lade_pytest bash ${PROJECT_SOURCE_DIR}/scripts/pytest.sh)
  set(_lade_py_env "LADE_BUILD=${CMAKE_BINARY_DIR}" "LADE_PYTHON3=${LADE_PYTHON3}")
  file(GLOB _lade_py_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/python/test_*.py)
  foreach(f ${_lade_py_tests})
    get_filename_component(n ${f} NAME_WE)
    string(REGEX REPLACE "^test_" "python_" n ${n})
    add_test(NAME ${n} COMMAND ${_lade_pytest} ${f} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(${n} PROPERTIES LABELS "python;integration" TIMEOUT 600 ENVIRONMENT "${_lade_py_env}")
    # `torchrun --standalone` always listens on localhost:29400: two at once
    # (ctest -j) would meet in one rendezvous, so the files that start one
    # take turns with each other and with the ucx test
    file(READ ${f} _lade_py_src)
    if(_lade_py_src MATCHES "torchrun|torch\\.distributed\\.run")
      set_tests_properties(${n} PROPERTIES RESOURCE_LOCK torchrun)
    endif()
  endforeach()

  # The lifetime tests again with AddressSanitizer preloaded, in a sanitized build only.
  if(LADE_SANITIZE)
    add_test(NAME python_lifetime_asan COMMAND ${_lade_pytest} ${PROJECT_SOURCE_DIR}/tests/python/test_lifetime.py
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(python_lifetime_asan PROPERTIES LABELS "python;asan" TIMEOUT 600
      ENVIRONMENT "${_lade_py_env};UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endif()
