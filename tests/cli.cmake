# The sagejit command-line tool, run as a program (tests/test_cli.c).
# CPU-only: the GPU paths of check/bench assert their exit-2 behaviour here
# and a passing `check --quick` on a machine with a GPU.
sj_add_test(test_cli SOURCES test_cli.c LABELS cpu TIMEOUT 900)
# sj_testutil calls sj_driver_info: list the library again after it.
target_link_libraries(test_cli PRIVATE sj_testutil sagejit_static
                      SQLite::SQLite3)
add_dependencies(test_cli sagejit_cli)
