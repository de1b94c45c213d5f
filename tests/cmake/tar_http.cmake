# (named to sort after s3.cmake, which defines s3_check.) Remote tar shards (http:// URLs) against a real nginx on loopback, with the
# S3 tests' fault proxy in front for latency and faults (tests/http/). Uses
# s3_check (tests/cmake/s3.cmake) to drive the loader. Skipped (status 77)
# when nginx is missing; the fault tests skip themselves without node.
if(LADE_HAVE_CURL AND LADE_PYTHON3 AND TARGET s3_check)
  add_test(NAME http_tar
    COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/http/test_http.py
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(http_tar PROPERTIES LABELS "integration;http" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "S3_CHECK=$<TARGET_FILE:s3_check>;PYTHONDONTWRITEBYTECODE=1")
endif()
