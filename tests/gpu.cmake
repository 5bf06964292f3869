# GPU suites: skip() without a usable CUDA device (CI), run on the H100.
sj_add_test(test_gpu SOURCES test_gpu.c LABELS gpu TIMEOUT 1800)
target_link_libraries(test_gpu PRIVATE Threads::Threads)
sj_add_test(test_gpu_varlen SOURCES test_gpu_varlen.c LABELS gpu TIMEOUT 1800)
