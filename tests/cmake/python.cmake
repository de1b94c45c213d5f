# Python module tests (pytest), registered when the module is built.
if(TARGET lade_python AND LADE_PYTHON3)
  set(_lade_py_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "LADE_CLI=$<TARGET_FILE:lade_cli>"
                   "PYTHONDONTWRITEBYTECODE=1")
  if(LADE_SANITIZE)
    # an ASan-instrumented module only loads into python3 with the runtime preloaded
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _lade_libasan OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND _lade_py_env "LD_PRELOAD=${_lade_libasan}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
  add_test(NAME python
    COMMAND ${LADE_PYTHON3} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/tests/python
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(python PROPERTIES LABELS "python;integration" TIMEOUT 600 ENVIRONMENT "${_lade_py_env}")

  # The lifetime tests again with AddressSanitizer preloaded, in a sanitized build only.
  if(LADE_SANITIZE)
    add_test(NAME python_lifetime_asan
      COMMAND ${LADE_PYTHON3} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/tests/python/test_lifetime.py
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(python_lifetime_asan PROPERTIES LABELS "python;asan" TIMEOUT 600
      ENVIRONMENT "${_lade_py_env};UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endif()
