# Runtime suites (CPU): targets, plans, validation, and NVRTC compiles.
sj_add_test(test_runtime SOURCES test_runtime.c LABELS cpu TIMEOUT 120)
sj_add_test(test_compile SOURCES test_compile.c LABELS cpu TIMEOUT 1200)
# The full option matrix of each family for one target each: minutes of
# NVRTC, so its own label (the sanitizer passes run -L cpu).
sj_add_test(test_compile_matrix SOURCES test_compile_matrix.c LABELS compile
            TIMEOUT 1500)
# The installed package works for a consumer (find_package and pkg-config).
add_test(NAME test_consumer
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.sh ${PROJECT_BINARY_DIR}
          ${PROJECT_SOURCE_DIR})
set_tests_properties(test_consumer PROPERTIES LABELS cpu TIMEOUT 300)
