#!/bin/bash
# bench/two_gpu.sh BUILD [OUTDIR] -- two GPUs of one host sharing one kernel
# cache directory (issue 6).  Needs >= 2 GPUs of the same kind (H100 x2);
# no NCCL, nothing between the processes but the cache file.
#
#  A. sequential, one EMPTY directory, the CLI's --device: `sagejit check
#     --quick --json` on GPU 0 compiles the kernels; the same on GPU 1 then
#     compiles nothing and loads every kernel from the file (the library's
#     counters in the JSON's "stats").  Both must pass.
#  B. concurrent, a second EMPTY directory, CUDA_VISIBLE_DEVICES: both
#     processes at once.  Both must pass, and together they compile each
#     kernel once (compile leases: the other process waits and loads).
#  Both caches must verify clean and hold the same number of kernels.
#
# Logs and JSON under OUTDIR (default $OUT/two_gpu, else /tmp/out/two_gpu);
# the last line is the verdict.  Exit 0 on PASS, 1 on FAIL, 2 if it cannot
# run (fewer than 2 GPUs, no python3).
set -u
usage="usage: bench/two_gpu.sh BUILD [OUTDIR]"
build=$(cd "${1:?$usage}" && pwd) || exit 2
out=${2:-${OUT:-/tmp/out}/two_gpu}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=$build/gpu-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SAGEJIT_CACHE_PATH= # no read-only layers: only the shared directory
unset SAGEJIT_CACHE_DISABLE SAGEJIT_ARCH SAGEJIT_FAMILY
unset CUDA_VISIBLE_DEVICES # phase A picks GPUs with --device, phase B sets it
cli=$build/sagejit
[ -x "$cli" ] || { echo "two_gpu: CANNOT RUN: $cli is missing"; exit 2; }
command -v python3 > /dev/null || { echo "two_gpu: CANNOT RUN: no python3"; exit 2; }

ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
nvidia-smi -L 2> /dev/null | tee "$out/gpus.txt"
if [ "$ngpu" -lt 2 ]; then
  echo "two_gpu: CANNOT RUN: $ngpu GPU(s) visible, 2 needed"
  exit 2
fi

# field FILE EXPR: a value of a check --json output (python expression over
# the parsed object d), "?" if unreadable
field() {
  python3 - "$1" "$2" << 'EOF' 2> /dev/null || echo "?"
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text[text.index("{"):])
print(eval(sys.argv[2], {"d": d}))
EOF
}

# summary NAME FILE RC SECONDS: one line per run
summary() {
  printf '%-12s rc=%s %5.1fs cases=%s passed=%s failed=%s skipped=%s target=%s compiles=%s disk_hits=%s misses=%s mem_hits=%s driver_rejects=%s\n' \
    "$1" "$3" "$4" "$(field "$2" 'd["cases"]')" "$(field "$2" 'd["passed"]')" \
    "$(field "$2" 'd["failed"]')" "$(field "$2" 'd["skipped"]')" \
    "$(field "$2" 'd["target"]')" "$(field "$2" 'd["stats"]["compiles"]')" \
    "$(field "$2" 'd["stats"]["disk_hits"]')" "$(field "$2" 'd["stats"]["misses"]')" \
    "$(field "$2" 'd["stats"]["mem_hits"]')" \
    "$(field "$2" 'd["stats"]["driver_rejects"]')" | tee -a "$out/summary.txt"
}

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }

: > "$out/summary.txt"
verdict=PASS
why=""
fail() {
  verdict=FAIL
  why="$why; $*"
}

# ------------------------------------------------------- A. one, then other
dir_a=$(mktemp -d "$out/cache-seq.XXXXXX")
echo "=== A: sequential on an empty cache $dir_a"
t0=$(now)
"$cli" check --quick --json --device 0 --cache-dir "$dir_a" \
  > "$out/A-gpu0.json" 2> "$out/A-gpu0.err"
rc_a0=$?
t1=$(now)
"$cli" check --quick --json --device 1 --cache-dir "$dir_a" \
  > "$out/A-gpu1.json" 2> "$out/A-gpu1.err"
rc_a1=$?
t2=$(now)
summary "A gpu0" "$out/A-gpu0.json" "$rc_a0" "$(elapsed "$t0" "$t1")"
summary "A gpu1" "$out/A-gpu1.json" "$rc_a1" "$(elapsed "$t1" "$t2")"
a0_compiles=$(field "$out/A-gpu0.json" 'd["stats"]["compiles"]')
a1_compiles=$(field "$out/A-gpu1.json" 'd["stats"]["compiles"]')
a1_misses=$(field "$out/A-gpu1.json" 'd["stats"]["misses"]')
a1_disk=$(field "$out/A-gpu1.json" 'd["stats"]["disk_hits"]')
t_a0=$(field "$out/A-gpu0.json" 'd["target"]')
t_a1=$(field "$out/A-gpu1.json" 'd["target"]')
[ "$rc_a0" = 0 ] || fail "A: GPU 0 check exited $rc_a0 (see A-gpu0.err)"
[ "$rc_a1" = 0 ] || fail "A: GPU 1 check exited $rc_a1 (see A-gpu1.err)"
[ "$(field "$out/A-gpu0.json" 'd["failed"]')" = 0 ] || fail "A: GPU 0 cases failed"
[ "$(field "$out/A-gpu1.json" 'd["failed"]')" = 0 ] || fail "A: GPU 1 cases failed"
if [ "$t_a0" != "$t_a1" ]; then
  fail "A: the GPUs have different targets ($t_a0, $t_a1): the second must compile its own"
else
  [ "$a0_compiles" != "?" ] && [ "$a0_compiles" -gt 0 ] ||
    fail "A: GPU 0 compiled nothing on an empty cache ($a0_compiles)"
  [ "$a1_compiles" = 0 ] || fail "A: GPU 1 compiled $a1_compiles kernels (want 0)"
  [ "$a1_misses" = 0 ] || fail "A: GPU 1 missed $a1_misses kernels (want 0)"
  [ "$a1_disk" != "?" ] && [ "$a1_disk" -gt 0 ] ||
    fail "A: GPU 1 loaded nothing from disk ($a1_disk)"
fi

# ----------------------------------------------------------- B. both at once
dir_b=$(mktemp -d "$out/cache-conc.XXXXXX")
echo "=== B: concurrent on an empty cache $dir_b"
t0=$(now)
CUDA_VISIBLE_DEVICES=0 "$cli" check --quick --json --cache-dir "$dir_b" \
  > "$out/B-gpu0.json" 2> "$out/B-gpu0.err" &
p0=$!
CUDA_VISIBLE_DEVICES=1 "$cli" check --quick --json --cache-dir "$dir_b" \
  > "$out/B-gpu1.json" 2> "$out/B-gpu1.err" &
p1=$!
wait "$p0"
rc_b0=$?
wait "$p1"
rc_b1=$?
t1=$(now)
summary "B gpu0" "$out/B-gpu0.json" "$rc_b0" "$(elapsed "$t0" "$t1")"
summary "B gpu1" "$out/B-gpu1.json" "$rc_b1" "$(elapsed "$t0" "$t1")"
b0_compiles=$(field "$out/B-gpu0.json" 'd["stats"]["compiles"]')
b1_compiles=$(field "$out/B-gpu1.json" 'd["stats"]["compiles"]')
[ "$rc_b0" = 0 ] || fail "B: GPU 0 check exited $rc_b0 (see B-gpu0.err)"
[ "$rc_b1" = 0 ] || fail "B: GPU 1 check exited $rc_b1 (see B-gpu1.err)"
[ "$(field "$out/B-gpu0.json" 'd["failed"]')" = 0 ] || fail "B: GPU 0 cases failed"
[ "$(field "$out/B-gpu1.json" 'd["failed"]')" = 0 ] || fail "B: GPU 1 cases failed"
b_sum="?"
if [ "$b0_compiles" != "?" ] && [ "$b1_compiles" != "?" ]; then
  b_sum=$((b0_compiles + b1_compiles))
  [ "$t_a0" != "$t_a1" ] || [ "$b_sum" = "$a0_compiles" ] ||
    fail "B: $b0_compiles + $b1_compiles compiles for $a0_compiles kernels (leases should make it one each)"
fi

# ----------------------------------------------------------- the two caches
for d in "$dir_a" "$dir_b"; do
  "$cli" cache verify --json --cache-dir "$d" > "$out/verify-$(basename "$d").json" 2>&1 ||
    fail "cache verify $d failed"
  [ "$(field "$out/verify-$(basename "$d").json" 'd["corrupt"]')" = 0 ] ||
    fail "cache $d has corrupt rows"
done
n_a=$(field "$out/verify-$(basename "$dir_a").json" 'd["checked"]')
n_b=$(field "$out/verify-$(basename "$dir_b").json" 'd["checked"]')
[ "$n_a" = "$n_b" ] || fail "the caches hold $n_a and $n_b kernels"
echo "caches: sequential $n_a kernels, concurrent $n_b kernels, both verify clean" |
  tee -a "$out/summary.txt"

why=${why#; }
if [ "$verdict" = PASS ]; then
  echo "two_gpu: PASS: sequential: GPU 0 compiled $a0_compiles kernels, GPU 1 compiled 0 and loaded $a1_disk from the shared cache; concurrent: $b0_compiles + $b1_compiles = $b_sum compiles (one per kernel); both GPUs pass check --quick; caches verify clean" |
    tee -a "$out/summary.txt"
  exit 0
fi
echo "two_gpu: FAIL: $why (logs in $out)" | tee -a "$out/summary.txt"
exit 1
