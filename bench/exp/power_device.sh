#!/bin/bash
# The thirty-third session's check of what the l2 row's +8 % at 8K-16K is
# (bench/NOTES.md): under ncu (one launch, no sustained load) the shipped
# solo kernel and the l2half ablation take the same time at 16K (18.9 /
# 19.0 ms, ~930 TOPS), while `sagejit bench` (25 back-to-back calls) puts
# l2half 7.7 % ahead.  If the sustained load meets the board's power cap,
# the SM clock drops, and less L2 traffic is less power.  This samples the
# SM clock and the board power every 100 ms while each variant runs ~2-3 s
# at 4K and 16K (D = 128, non-causal).  Templates and caches as in
# bench/exp/l2_ncu_device.sh (ab/cur, ab/l2half).  Through the device tool
# (carry build-gpu and ab):  bash bench/exp/power_device.sh [l2|plans|solo|d64|trio]
#   l2     (the default) the shipped templates and l2half, as first run
#   plans  the built library's default, SAGEJIT_TUNE=nc=2 (two consumers:
#          128-row CTAs, half the K/V traffic) and SDPA-cuDNN, each short
#          (25 calls, as `sagejit bench` times them) and sustained
#   solo   the default (solo CTAs up to SJ_SOLO_SEQ) against nc=2 at 8K and
#          16K, causal and not, short after 10 s idle and sustained
#   d64    the same at D = 64: solo (its default) against nc=1 and nc=2
#   trio   with bench/exp/trio.patch applied: check nc=3, then the default
#          against nc=2 and nc=3 (three solo warpgroups in one 192-row CTA)
#          at 4K / 8K / 16K non-causal; warm the plans cache with
#          SAGEJIT_TUNE=nc=3 first (run in the thirty-fourth session: the
#          trio lost, bench/NOTES.md's trio row)
set -u
B=build-gpu
. bench/gpu_libs.sh
gpu_libs $B
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
set_=${1:-l2}
# summary CSV: the samples of the run's middle half, median clock (MHz),
# power (W)
summ() {
  python3 - "$1" <<'PY'
import sys
rows = [l.split(",") for l in open(sys.argv[1]) if l.strip()]
rows = [(float(c), float(p), float(t)) for c, p, t in rows]
mid = rows[len(rows) // 4: 3 * len(rows) // 4] or rows
med = lambda xs: sorted(xs)[len(xs) // 2]
print("   samples %d, clock %.0f MHz (min %.0f), power %.0f W (max %.0f), temp %.0f C" % (
    len(rows), med([r[0] for r in mid]), min(r[0] for r in mid), med([r[1] for r in mid]),
    max(r[1] for r in mid), med([r[2] for r in mid])))
PY
}
# sample NAME CMD...: CMD's timing lines, then the clock and power meanwhile
sample() {
  local name=$1
  shift
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > "$OUT/smi-$name.csv" &
  local p=$!
  "$@" 2>&1 | grep -E "^ +[0-9]|TOPS" | sed "s/^/$name /"
  kill $p; wait $p 2>/dev/null
  summ "$OUT/smi-$name.csv"
  sleep 3
}
sjc() { # sjc - N ITERS CAUSAL TUNE: the build's own templates, head dim $HD (128)
  SAGEJIT_TUNE=$5 SAGEJIT_CACHE_DIR=$PWD/$B/test-cache/plans timeout 120 \
    $B/sagejit bench -q --family wgmma --head-dim ${HD:-128} --seq $2 --causal $4 --iters $3 --warmup 5
}
sj() { # sj VARIANT N ITERS [TUNE]: non-causal, on ab/VARIANT (or the build's own templates: -)
  local v=$1 n=$2 it=$3 tune=${4:-}
  if [ "$v" = - ]; then
    sjc - $n $it 0 "$tune"
  else
    SAGEJIT_TUNE=$tune SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$B/test-cache/ab-$v \
      timeout 120 $B/sagejit bench -q --family wgmma --head-dim 128 --seq $n --causal 0 \
      --iters $it --warmup 5
  fi
}
# versus ROUNDS "N:ITERS ..." "CAUSAL ..." "TUNE ..." LABEL: each tune (""
# for the default, named LABEL) after 10 s idle (a cool board, as a first
# benchmark call finds it) in a burst of 25 calls, then sustained over ITERS
versus() {
  local rounds=$1 seqs=$2 causals=$3 tunes=$4 label=$5 r n c t
  for r in $(seq "$rounds"); do
    for n in $seqs; do
      for c in $causals; do
        for t in $tunes; do
          [ "$t" = - ] && t=
          sleep 10
          sample "r$r-${t:-$label}-d${HD:-128}-${n%%:*}-c$c-20" sjc - ${n%%:*} 20 $c "$t"
          sample "r$r-${t:-$label}-d${HD:-128}-${n%%:*}-c$c-${n#*:}" sjc - ${n%%:*} ${n#*:} $c "$t"
        done
      done
    done
  done
}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
if [ "$set_" = l2 ]; then
  for n in 16384:120 4096:1800; do
    for v in cur l2half cur; do
      sample "$v-${n%%:*}" sj $v ${n%%:*} ${n#*:}
    done
  done
elif [ "$set_" = trio ]; then
  # bench/exp/trio.patch applied: `check` on the trio first (a hang stops
  # the set), then the default against nc=2 and nc=3 at 4K-16K non-causal,
  # two rounds, burst after 10 s idle and sustained
  SAGEJIT_TUNE=nc=3 SAGEJIT_CACHE_DIR=$PWD/$B/test-cache/plans timeout 200 \
    $B/sagejit check --family wgmma --head-dim 128 --dtype fp16,bf16 > "$OUT/check-trio.log" 2>&1
  rc=$?
  echo "check nc=3: rc=$rc, $(tail -1 "$OUT/check-trio.log")"
  [ $rc -eq 124 ] && exit 1
  versus 2 "4096:1800 8192:400 16384:120" 0 "- nc=2 nc=3" default
elif [ "$set_" = d64 ]; then
  # D = 64 (solo CTAs at every length) against one and two consumers at
  # 8K and 16K, causal and not, one round
  HD=64 versus 1 "8192:700 16384:200" "0 1" "- nc=1 nc=2" solo
elif [ "$set_" = solo ]; then
  # SJ_SOLO_SEQ: solo CTAs against two consumers at 8K and 16K, causal or
  # not, two rounds
  versus 2 "8192:400 16384:120" "0 1" "- nc=2" solo
else
  for n in 16384:120 4096:1800; do
    for it in 20 ${n#*:}; do
      sample "default-${n%%:*}-$it" sj - ${n%%:*} $it
      sample "nc2-${n%%:*}-$it" sj - ${n%%:*} $it nc=2
      sample "cudnn-${n%%:*}-$it" timeout 120 python3 bench/sdpa_baseline.py --head-dim 128 \
        --seq ${n%%:*} --causal 0 --iters $it --warmup 5 --backends cudnn
    done
  done
fi 2>&1 | tee "$OUT/power-$set_.log"
