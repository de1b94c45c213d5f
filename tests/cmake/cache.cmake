# Cache tiers: the put/get benchmark (bench/cache_tiers.c); the unit test is
# tests/unit/test_cache.c.
add_executable(bench_cache_tiers ${PROJECT_SOURCE_DIR}/bench/cache_tiers.c)
target_include_directories(bench_cache_tiers PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(bench_cache_tiers PRIVATE _GNU_SOURCE)
target_link_libraries(bench_cache_tiers PRIVATE lade_static)
