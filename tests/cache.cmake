# Tests of the kernel cache (cache/).  Included from tests/CMakeLists.txt,
# which defines sj_add_test().  All of them run without a GPU; the NVRTC
# checks dlopen libnvrtc and skip when it is missing.  The read-only and
# foreign-owner checks fork a child that becomes uid 65534 ("nobody") and
# skip when the tests do not run as root.

set(SJ_CACHE_TEST_UTIL testutil.c test_cache_util.c)

sj_add_test(test_key SOURCES test_key.c LABELS cpu TIMEOUT 300)
sj_add_test(test_cache
  SOURCES test_cache.c ${SJ_CACHE_TEST_UTIL} LABELS cpu TIMEOUT 300)
sj_add_test(test_cache_image
  SOURCES test_cache_image.c ${SJ_CACHE_TEST_UTIL} LABELS cpu TIMEOUT 300)
sj_add_test(test_cache_proc
  SOURCES test_cache_proc.c ${SJ_CACHE_TEST_UTIL} LABELS cpu TIMEOUT 300)
sj_add_test(test_cache_layers
  SOURCES test_cache_layers.c ${SJ_CACHE_TEST_UTIL} LABELS cpu TIMEOUT 300)
sj_add_test(test_cache_crash
  SOURCES test_cache_crash.c ${SJ_CACHE_TEST_UTIL} LABELS cpu TIMEOUT 300)

# libFuzzer target over sj_cache_db_import.  The cache sources are compiled
# into it directly so that they carry the fuzzer's coverage instrumentation.
if(SAGEJIT_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(WARNING "SAGEJIT_FUZZ needs clang; fuzz_cache_import not built")
  else()
    set(SJ_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined
        -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    add_executable(fuzz_cache_import fuzz_cache_import.c
      ${PROJECT_SOURCE_DIR}/cache/key.c
      ${PROJECT_SOURCE_DIR}/cache/cache.c
      ${PROJECT_SOURCE_DIR}/cache/cache_db.c
      ${PROJECT_SOURCE_DIR}/cache/cache_image.c
      ${PROJECT_SOURCE_DIR}/cache/cache_maint.c
      ${PROJECT_SOURCE_DIR}/cache/cache_lease.c)
    target_include_directories(fuzz_cache_import PRIVATE
      ${PROJECT_SOURCE_DIR}/cache ${SJ_XXHASH_INCLUDE_DIR}
      ${SQLite3_INCLUDE_DIRS})
    target_compile_definitions(fuzz_cache_import PRIVATE _GNU_SOURCE)
    target_compile_options(fuzz_cache_import PRIVATE ${SJ_WARNINGS}
      ${SJ_FUZZ_FLAGS})
    target_link_options(fuzz_cache_import PRIVATE ${SJ_FUZZ_FLAGS})
    target_link_libraries(fuzz_cache_import PRIVATE SQLite::SQLite3
      ${SJ_XXHASH_LIBRARY} Threads::Threads)
    # A bounded run: the corpus starts from a valid export written by the
    # target itself (SJ_FUZZ_SEED_DIR) and is kept in the build tree.
    set(SJ_FUZZ_CORPUS ${CMAKE_CURRENT_BINARY_DIR}/fuzz-cache-import-corpus)
    file(MAKE_DIRECTORY ${SJ_FUZZ_CORPUS})
    add_test(NAME fuzz_cache_import
      COMMAND fuzz_cache_import -max_total_time=20 -timeout=10
              -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
              ${SJ_FUZZ_CORPUS})
    set_tests_properties(fuzz_cache_import PROPERTIES
      LABELS "cpu;fuzz" TIMEOUT 120
      ENVIRONMENT "SJ_FUZZ_SEED_DIR=${SJ_FUZZ_CORPUS}")
  endif()
endif()
