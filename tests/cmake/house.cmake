# The house rules (docs/architecture.md): file and function sizes in src/,
# python/ and tools/, and no two files of a src/ folder using each other
# both ways (scripts/house.py, scripts/deps.py). Reads the tree; builds nothing.
if(LADE_PYTHON3)
  add_test(NAME house COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/house.py)
  set_tests_properties(house PROPERTIES LABELS unit TIMEOUT 120)
endif()
