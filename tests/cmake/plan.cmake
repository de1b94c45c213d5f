# The planner CLI: lade plan / simulate / model (tests/plan/test_plan_cli.sh).
add_test(NAME plan_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/plan/test_plan_cli.sh $<TARGET_FILE:lade_cli>
         ${CMAKE_CURRENT_BINARY_DIR}/tmp/plan_cli)
set_tests_properties(plan_cli PROPERTIES LABELS integration TIMEOUT 300)
