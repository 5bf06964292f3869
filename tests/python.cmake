# Python bindings (python/): the pytest suite of tests/python, run by the
# system interpreter against the library just built.  GPU tests skip without
# CUDA and tests that need torch skip without it; the whole test is skipped
# (return code 77) when the interpreter or pytest is missing.
set(SJ_PYTHON3 /usr/bin/python3 CACHE FILEPATH
    "Interpreter of the Python binding tests (needs pytest; torch optional)")
add_test(NAME test_python
  COMMAND sh -c "if [ ! -x \"$0\" ] || ! \"$0\" -c 'import pytest' 2>/dev/null; then echo \"test_python: skipped: $0 or its pytest is missing (apt-get install python3-pytest python3-torch)\"; exit 77; fi; exec \"$0\" -m pytest -q -p no:cacheprovider tests/python"
          ${SJ_PYTHON3}
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_python PROPERTIES
  LABELS cpu
  SKIP_RETURN_CODE 77
  TIMEOUT 900
  ENVIRONMENT "SAGEJIT_LIBRARY=$<TARGET_FILE:sagejit>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;SAGEJIT_CACHE_DIR=${PROJECT_BINARY_DIR}/test-cache/test_python;SAGEJIT_CACHE_PATH=")
