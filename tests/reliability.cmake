# Reliability suites (issue 6): faults, concurrency, bad input and hostile
# files at the process level.  Included from tests/CMakeLists.txt, which
# defines sj_add_test().
#
#   test_reliability  CPU: 16 concurrent `sagejit warm` processes with
#                     overlapping kernel sets, compile leases across
#                     processes, single flight across threads, SIGKILLed
#                     warm processes, zombie lease holders.
#   test_gpu_faults   GPU (skips without one): NaN/Inf confinement, poisoned
#                     padding, and a cached image the driver rejects.  Its
#                     CPU part (the substituted image passes every cache
#                     check) runs everywhere.

sj_add_test(test_reliability
  SOURCES test_reliability.c test_cache_util.c
  LABELS cpu reliability TIMEOUT 900)
# sj_testutil calls sj_driver_info: list the library again after it.
target_link_libraries(test_reliability PRIVATE sj_testutil sagejit_static
                      SQLite::SQLite3 Threads::Threads)
add_dependencies(test_reliability sagejit_cli)

sj_add_test(test_gpu_faults
  SOURCES test_gpu_faults.c test_cache_util.c
  LABELS gpu reliability TIMEOUT 900)
target_link_libraries(test_gpu_faults PRIVATE sj_testutil sagejit_static
                      SQLite::SQLite3)
