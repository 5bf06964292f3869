# Runtime suites (CPU): targets, plans, validation, and NVRTC compiles.
sj_add_test(test_runtime SOURCES test_runtime.c LABELS cpu TIMEOUT 120)
sj_add_test(test_compile SOURCES test_compile.c LABELS cpu TIMEOUT 1200)
