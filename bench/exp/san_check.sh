#!/bin/bash
# bench/exp/san_check.sh -- sourced by the fiftieth session's device
# scripts: san_check BUILD OUT NAME TOOL CHECK-ARGS... runs
# `sagejit check --quick --dtype fp16 CHECK-ARGS` under compute-sanitizer
# TOOL (memcheck, racecheck), logs to OUT/san-NAME.log and prints the
# exit status, the tool's summary and check's verdict on one line.
san_check() {
  local b=$1 out=$2 name=$3 tool=$4
  shift 4
  local cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
  timeout 200 "$cs" --tool "$tool" --error-exitcode 9 "$b/sagejit" check --quick --dtype fp16 \
    "$@" > "$out/san-$name.log" 2>&1
  echo "san $name: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san-$name.log" | tail -1) $(grep -E 'passed|failed' "$out/san-$name.log" | tail -1)"
}
