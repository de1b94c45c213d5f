# The allocation-failure run (tests/unit/test_allocfail.c): lade's own
# allocations are rebound to the test's wrappers at link time, so the test
# can fail the Nth one. Only where GNU ld's --wrap exists.
if(TARGET test_allocfail)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(test_allocfail PRIVATE
      "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign")
    set_tests_properties(test_allocfail PROPERTIES TIMEOUT 1200)
  endif()
endif()
