# Remote tar shards: http:// URLs against a real nginx on loopback (the S3
# tests' fault proxy in front for latency and faults) and s3:// shards on the
# S3 tests' server (tests/http/). Uses s3_check from tests/cmake/s3.cmake to
# drive the loader: this file's name sorts after it on purpose. Skipped (status 77)
# when nginx is missing; the fault tests skip themselves without node, the
# s3:// shard tests without node, npm or boto3 (s3env), the https:// tests
# (a throwaway CA) without openssl.
if(LADE_HAVE_CURL AND LADE_PYTHON3 AND TARGET s3_check)
  add_test(NAME http_tar
    COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/http/test_http.py
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(http_tar PROPERTIES LABELS "integration;http" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "S3_CHECK=$<TARGET_FILE:s3_check>;LADE_NODE_DIR=${CMAKE_BINARY_DIR}/tests/node;PYTHONDONTWRITEBYTECODE=1")
endif()
# tests/unit/test_http.c (the http module's rules, no server) exits 77 when
# lade was built without libcurl: reported skipped, not passed.
if(TEST test_http)
  set_tests_properties(test_http PROPERTIES SKIP_RETURN_CODE 77)
endif()
