# S3 source tests against a real S3-compatible server (s3rver from npm) behind
# a fault-injecting proxy (tests/s3/). Skipped (status 77) when node, npm or
# boto3 are missing; not registered at all without libcurl.
if(LADE_HAVE_CURL AND LADE_PYTHON3)
  add_executable(s3_check ${PROJECT_SOURCE_DIR}/tests/s3/s3_check.c)
  target_include_directories(s3_check PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(s3_check PRIVATE _GNU_SOURCE)
  target_link_libraries(s3_check PRIVATE lade_static)
  add_test(NAME s3
    COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/s3/test_s3.py
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(s3 PROPERTIES LABELS "integration;s3" TIMEOUT 900 SKIP_RETURN_CODE 77
    ENVIRONMENT "S3_CHECK=$<TARGET_FILE:s3_check>;LADE_NODE_DIR=${CMAKE_BINARY_DIR}/tests/node;PYTHONDONTWRITEBYTECODE=1")
elseif(NOT LADE_HAVE_CURL)
  message(STATUS "S3 tests left out: no libcurl (LADE_WITH_CURL)")
endif()
