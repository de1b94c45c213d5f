add_test(NAME cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli.sh $<TARGET_FILE:lade_cli> ${CMAKE_CURRENT_BINARY_DIR}/tmp)
set_tests_properties(cli PROPERTIES LABELS integration TIMEOUT 300)
