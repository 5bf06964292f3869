# Runtime suites (CPU): targets, plans, validation, and NVRTC compiles.
sj_add_test(test_runtime SOURCES test_runtime.c LABELS cpu TIMEOUT 120)
sj_add_test(test_compile SOURCES test_compile.c LABELS cpu TIMEOUT 1200)
# The full option matrix of each family for one target each: minutes of
# NVRTC, so its own label (the sanitizer passes run -L cpu).
sj_add_test(test_compile_matrix SOURCES test_compile_matrix.c LABELS compile
            TIMEOUT 1500)
# ptxas's resource report of every WGMMA attention kernel: no spills.
sj_add_test(test_spills SOURCES test_spills.c LABELS compile TIMEOUT 900)
target_link_libraries(test_spills PRIVATE Threads::Threads)
# The installed package works for a consumer (find_package and pkg-config).
add_test(NAME test_consumer
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.sh ${PROJECT_BINARY_DIR}
          ${PROJECT_SOURCE_DIR})
set_tests_properties(test_consumer PROPERTIES LABELS cpu TIMEOUT 300)
# The host path (kernel resolution on the context's threads, loads,
# launches, driver rejects) on a stand-in libcuda: CPU, NVRTC compiles.
add_library(sj_fake_cuda SHARED fake_cuda.c)
target_include_directories(sj_fake_cuda PRIVATE ${SJ_CUDA_INCLUDE_DIR})
target_compile_definitions(sj_fake_cuda PRIVATE _GNU_SOURCE)
target_compile_options(sj_fake_cuda PRIVATE ${SJ_WARNINGS})
target_link_libraries(sj_fake_cuda PRIVATE Threads::Threads)
set_target_properties(sj_fake_cuda PROPERTIES C_VISIBILITY_PRESET default)
# No TIMEOUT of its own (sj_add_test's 600 s): its cold calls compile with NVRTC,
# and CI's ASan step runs it beside test_compile and test_reliability on
# two cores, where it once passed all nine tests in just over 300 s.
sj_add_test(test_host_path SOURCES test_host_path.c LABELS cpu)
target_compile_definitions(test_host_path PRIVATE
  SJ_FAKE_CUDA="$<TARGET_FILE:sj_fake_cuda>")
target_link_libraries(test_host_path PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
# sj_abi.h: the kernels' argument structs, as the fake driver captures them
target_include_directories(test_host_path PRIVATE ${PROJECT_SOURCE_DIR}/kernel_templates)
add_dependencies(test_host_path sj_fake_cuda)
