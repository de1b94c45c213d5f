# tests/unit/test_hdf5.c exits 77 when lade was built without libhdf5
# (LADE_WITH_HDF5): ctest reports it skipped, not passed. The Python tests
# (tests/python/test_hdf5.py) skip themselves the same way.
if(TEST test_hdf5)
  set_tests_properties(test_hdf5 PROPERTIES SKIP_RETURN_CODE 77)
endif()
