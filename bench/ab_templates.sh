#!/bin/bash
# bench/ab_templates.sh BUILD VARIANT... -- A/B of kernel template versions
# in one device call: each VARIANT is a directory of templates (a copy of
# kernel_templates/ with one change), optionally followed by @TUNE, a
# $SAGEJIT_TUNE value for that variant only (ab_x@stages=4), timed by
# `sagejit bench` through $SAGEJIT_TEMPLATE_DIR with its own cache
# BUILD/test-cache/ab-NAME (NAME: the directory's name, then the tune with
# @ = and , as _ - -; warm it on the CPU machine first, see below).  The
# first variant is the baseline.  Every other variant first passes `sagejit check` (a hang, the
# usual sign of a broken barrier count, stops the script), then the
# variants are timed in alternation, ROUNDS times, and a table gives each
# cell's runs and its change against the baseline, attention and end to end.
#
#   CHECK   check options (default: --family wgmma --head-dim 64,128 --dtype fp16)
#   BENCH   bench options (default: wgmma, D 128 and 64, causal both ways)
#   ROUNDS  alternations (default 2)
#
# Warming a variant on the CPU machine (NVRTC only, no GPU; a tuned one
# with its SAGEJIT_TUNE and cache name, e.g. ab-ab_x_stages-4):
#   SAGEJIT_TEMPLATE_DIR=$PWD/ab_x build-gpu/sagejit warm --arch sm_90a \
#     --family wgmma --head-dim 64,128 --dtype fp16 --cache-dir build-gpu/test-cache/ab-ab_x
# AB_CLI replaces the CLI (a stand-in that prints its environment tests
# this script without a GPU).
set -u
b=${1:?usage: bench/ab_templates.sh BUILD VARIANT_DIR...}
shift
[ $# -ge 2 ] || { echo "ab_templates: need a baseline and at least one variant" >&2; exit 2; }
. "$(dirname "$0")/gpu_libs.sh"
gpu_libs "$b"
cli=${AB_CLI:-$PWD/$b/sagejit}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CHECK=${CHECK:---family wgmma --head-dim 64,128 --dtype fp16}
BENCH=${BENCH:---family wgmma --head-dim 128,64 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3}
# vname VARIANT: its label and cache name; run_v VARIANT CMD...: the CLI
# with the variant's templates, tune and cache
vname() {
  local d=${1%%@*}
  echo "$(basename "$d")${1#"$d"}" | sed 's/@/_/; s/[=,]/-/g'
}
run_v() {
  local v=$1 tune=
  shift
  [[ $v == *@* ]] && tune=${v#*@}
  SAGEJIT_TUNE=$tune SAGEJIT_TEMPLATE_DIR=$PWD/${v%%@*} \
    SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$(vname "$v") "$@"
}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
base=$1
for v in "${@:2}"; do
  # shellcheck disable=SC2086
  run_v "$v" timeout 150 "$cli" check $CHECK > "$OUT/check-$(vname "$v").log" 2>&1
  rc=$?
  echo "check $v: rc=$rc, $(tail -1 "$OUT/check-$(vname "$v").log")"
  if [ $rc -eq 124 ]; then
    echo "ab_templates: $v hung in check; stopping" >&2
    exit 1
  fi
done
for r in $(seq "${ROUNDS:-2}"); do
  for v in "$@"; do
    echo "--- $(vname "$v") round $r"
    # shellcheck disable=SC2086
    run_v "$v" timeout 150 "$cli" bench $BENCH -q 2>&1 | grep -E "^ +[0-9]" | grep -v skipped
  done
done > "$OUT/ab.log"
python3 - "$OUT/ab.log" "$(vname "$base")" <<'PY'
import collections, sys
runs, cur, base = collections.defaultdict(list), None, sys.argv[2]
names = []
for line in open(sys.argv[1]):
    if line.startswith("---"):
        cur = line.split()[1]
        if cur not in names:
            names.append(cur)
        continue
    f = line.split()  # seq dim causal dtype family quant/accum attn e2e prep host
    for col, what in ((6, "attn"), (7, "e2e")):
        # (a dtype other than fp16 joins the accumulation mode's column)
        acc = f[5] if f[3] == "fp16" else f[5] + "/" + f[3]
        runs[((f[4], acc, int(f[1]), int(f[2]), int(f[0]), what), cur)].append(float(f[col]))
for k in sorted({k for k, _ in runs}):
    ref = runs.get((k, base))
    if not ref:
        continue
    m = sum(ref) / len(ref)
    row = "%-6s %-28s D%-3d c%d %5d %-4s  %s %s" % (k + (base, "/".join("%.0f" % x for x in ref)))
    for v in names[1:]:
        x = runs.get((k, v))
        if x:
            row += "  %s %s %+.1f%%" % (v, "/".join("%.0f" % y for y in x), 100 * (sum(x) / len(x) / m - 1))
    print(row)
PY
