#!/bin/bash
# bench/gpu_session.sh BUILD STEP... -- one device session: GPU tests, the CLI
# self-check, benchmarks and baselines, each step logged under $OUT.
# Steps: info prewarm test varlen faults check bench tune3 sdpa firstcall sanitize
# splitcheck splitbench splitlong autobench autolong sa2 timeline ...
set -u
build=${1:?build dir}; shift
. "$(dirname "$0")/gpu_libs.sh"
gpu_libs "$build"
export SAGEJIT_CACHE_DIR=${SAGEJIT_CACHE_DIR:-$PWD/$build/test-cache/test_gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cli=$PWD/$build/sagejit
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    info)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
      $cli info ;;
    prewarm)
      # every sm_90a kernel of the three families into the test cache with
      # all the device's cores: test_gpu then loads instead of compiling
      # one kernel at a time (a cold cache cost it ~480 s of NVRTC)
      timeout 400 $cli warm --arch sm_90a --family fp16pv,fp8pv,wgmma \
        --head-dim 32,64,96,128,256 --causal 0,1 --dtype fp16,bf16 \
        --quant per_block,per_warp,per_thread \
        --accum fp32,fp32+fp32,fp16+fp32,fp32+fp16,fp32+fp32+splitv,pv16,pvi8,pvi8+splitv \
        --no-progress > "$OUT/prewarm.log" 2>&1
      echo "prewarm rc=$?"; tail -2 "$OUT/prewarm.log" ;;
    test)
      timeout 480 $PWD/$build/tests/test_gpu > "$OUT/test_gpu.log" 2>&1
      echo "test_gpu rc=$?"; grep -E "FAIL|PASSED|FAILED|cases|first call|child" "$OUT/test_gpu.log" | head -40 ;;
    varlen)
      timeout 240 $PWD/$build/tests/test_gpu_varlen > "$OUT/test_gpu_varlen.log" 2>&1
      echo "test_gpu_varlen rc=$?"; grep -cE "^ok" "$OUT/test_gpu_varlen.log"; grep -E "FAIL|PASSED|FAILED" "$OUT/test_gpu_varlen.log" | head -20 ;;
    faults)
      timeout 200 $PWD/$build/tests/test_gpu_faults > "$OUT/test_gpu_faults.log" 2>&1
      echo "test_gpu_faults rc=$?"; grep -E "OK|FAIL|PASSED|FAILED|SKIP" "$OUT/test_gpu_faults.log" | head -20 ;;
    tune3)
      # three K/V buffers (default where it fits) vs two
      for tv in "stages=3" "stages=2"; do
        echo "--- $tv"
        SAGEJIT_TUNE=$tv timeout 150 $cli bench --family fp16pv,fp8pv --head-dim 128 --seq 4096,16384 --causal 0 --iters 10 2>&1 | grep -E "^ +[0-9]"
      done ;;
    sanitize)
      SAGEJIT_CACHE_PATH=$SAGEJIT_CACHE_DIR timeout 280 bash bench/sanitize_gpu.sh $build /tmp/san > "$OUT/sanitize.log" 2>&1
      echo "sanitize rc=$?"; tail -12 "$OUT/sanitize.log" ;;
    ctest)
      (cd $build && timeout 500 ctest -L gpu --output-on-failure) > "$OUT/ctest_gpu.log" 2>&1
      echo "ctest rc=$?"; tail -5 "$OUT/ctest_gpu.log" ;;
    check)
      timeout 300 $cli check > "$OUT/check.log" 2>&1; echo "check rc=$?"; tail -60 "$OUT/check.log" | cut -c1-160 ;;
    bench)
      timeout 400 $cli bench --family fp8pv,fp16pv > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; cat "$OUT/bench.log" | cut -c1-200 ;;
    sdpa)
      timeout 300 python3 bench/sdpa_baseline.py > "$OUT/sdpa.log" 2>&1; echo "sdpa rc=$?"; grep sdpa- "$OUT/sdpa.log" ;;
    tune)
      # rows per warp 16 vs 32: a quick check and the D=128 benchmark
      for wq in 16 32; do
        echo "--- warp_q=$wq"
        SAGEJIT_TUNE=warp_q=$wq timeout 120 $cli check --quick 2>&1 | tail -3
        SAGEJIT_TUNE=warp_q=$wq timeout 200 $cli bench --family fp16pv,fp8pv --head-dim 128 --seq 4096,16384 --causal 0 2>&1 | tail -5
      done ;;
    tune2)
      # keys per compute step 32 vs 64 at D=128, and the D=64 default
      for tv in "ksub=32" "ksub=64"; do
        echo "--- $tv"
        SAGEJIT_TUNE=$tv timeout 200 $cli bench --family fp16pv,fp8pv --accum fp32,fp32+fp32,fp32+fp16,fp16+fp32 --head-dim 128 --seq 4096,16384 --causal 0 2>&1 | grep -v "^sagejit" | tail -9
      done ;;
    ncu)
      timeout 240 ncu --clock-control none -k regex:attn_mma --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
        --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis \
        $cli bench --family fp16pv --head-dim 128 --seq 4096 --causal 0 --iters 1 --warmup 1 > "$OUT/ncu.txt" 2>&1
      echo "ncu rc=$?"; grep -E "Throughput|Issued|Eligible|Stall|Warp Cycles|Occupancy|Registers|Pipe|Executed Ipc|Duration|Active Warps" "$OUT/ncu.txt" | head -60 ;;
    sass)
      python3 bench/dump_sass.py "$SAGEJIT_CACHE_DIR/kernels.db" "attn_mma<sj::FP16PV,sj::FP16,128,false,sj::ACC_FP32,32" "$OUT/attn_fp16pv" ;;
    firstcall)
      timeout 200 $cli bench --first-call --head-dim 128 --seq 4096 --causal 0 > "$OUT/firstcall.log" 2>&1; echo "firstcall rc=$?"; cat "$OUT/firstcall.log" ;;
    wgcheck)
      # the wgmma family over the self-check matrix, every option
      timeout 300 $cli check --family wgmma --head-dim 64,128,256 --dtype fp16,bf16 \
        --quant per_block,per_warp,per_thread > "$OUT/wgcheck.log" 2>&1
      echo "wgcheck rc=$?"; grep -E "FAIL|passed|failed" "$OUT/wgcheck.log" | head -30 ;;
    wgquick)
      timeout 200 $cli check --quick --family wgmma --head-dim 64,128,256 --dtype fp16,bf16 \
        --quant per_block,per_warp,per_thread > "$OUT/wgquick.log" 2>&1
      echo "wgquick rc=$?"; grep -E "FAIL|passed|failed" "$OUT/wgquick.log" | head -30
      awk '$NF=="PASS"{if($(NF-4)+0>w)w=$(NF-4)+0} END{print "worst rel_l2", w}' "$OUT/wgquick.log" ;;
    wgbench)
      # wgmma beside fp8pv, then SDPA in the same call (D=128 and 64)
      timeout 300 $cli bench --family wgmma,fp8pv --head-dim 128,64 --causal 0,1 > "$OUT/wgbench.log" 2>&1
      echo "wgbench rc=$?"; cut -c1-200 "$OUT/wgbench.log" | grep -v "^sagejit" ;;
    wgncu)
      # one wgmma launch at 4K, D=128: stall reasons, pipes, hot SASS
      timeout 300 ncu --clock-control none -k regex:attn_wgmma --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section InstructionStats --section SourceCounters \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        $cli bench --family wgmma --head-dim 128 --seq 4096 --causal 0 --iters 1 --warmup 1 > "$OUT/wgncu.txt" 2>&1
      echo "wgncu rc=$?"; grep -vE "^ *-+ *$|^==PROF==" "$OUT/wgncu.txt" | grep -E "stalled|Throughput|Issued|Eligible|Pipe|Ipc|Duration|Active|Warp Cycles|No Eligible" | sed 's/  */ /g' | head -60 ;;
    prepncu)
      # the three preprocessing kernels at N=4K, D=128 (wgmma plan): time and DRAM throughput
      timeout 200 ncu --clock-control none -k regex:"kv_stats|kv_finalize|quant_qkv" --launch-skip 3 --launch-count 3 \
        --section SpeedOfLight $cli bench --family wgmma --head-dim 128 --seq 4096 --causal 0 --iters 1 --warmup 1 > "$OUT/prepncu.txt" 2>&1
      echo "prepncu rc=$?"; grep -E "kv_stats|kv_finalize|quant_qkv|Duration|DRAM Throughput|Memory Throughput" "$OUT/prepncu.txt" | sed 's/  */ /g' | head -20 ;;
    quantncu)
      # quant_qkv alone at N=4K, D=128 (wgmma plan): where its time goes
      timeout 200 ncu --clock-control none -k regex:quant_qkv --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section SourceCounters --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        $cli bench --family wgmma --head-dim 128 --seq 4096 --causal 0 --iters 1 --warmup 1 > "$OUT/quantncu.txt" 2>&1
      echo "quantncu rc=$?"; grep -vE "^==PROF==" "$OUT/quantncu.txt" | grep -E "stalled|Throughput|Occupancy|Active Warps|Registers|Shared|Bank|Duration|L1|L2|Excessive|uncoalesced|sectors" | sed 's/  */ /g' | awk '$NF!="0" && $NF!="0.00"' | head -50 ;;
    wgsass)
      python3 bench/dump_sass.py "$SAGEJIT_CACHE_DIR/kernels.db" "attn_wgmma<sj::FP16,128,false,sj::ACC_FP32_FP32" "$OUT/attn_wgmma" | cut -c1-600
      grep -cE "LDL|STL" "$OUT/attn_wgmma.sass" ;;
    splitcheck)
      # split V beside plain fp32+fp32, both FP8 families, the self-check matrix
      timeout 300 $cli check --family wgmma,fp8pv --accum fp32+fp32,fp32+fp32+splitv \
        --head-dim 64,128,256 --dtype fp16,bf16 > "$OUT/splitcheck.log" 2>&1
      echo "splitcheck rc=$?"; grep -E "FAIL|passed|failed" "$OUT/splitcheck.log" | head -20
      for a in "fp32+fp32 " "fp32+fp32+splitv"; do for f in wgmma fp8pv; do
        grep -F "$f" "$OUT/splitcheck.log" | grep -F "$a" | awk -v f=$f -v a="$a" '$NF=="PASS"{n++; if($(NF-4)+0>w)w=$(NF-4)+0} END{print f, a, n, "passed, worst rel_l2", w}'
      done; done ;;
    splitbench)
      # the cost of split V: both FP8 families, D = 128 and 64, causal both ways
      timeout 400 $cli bench --family wgmma,fp8pv --accum fp32+fp32,fp32+fp32+splitv --head-dim 128,64 \
        --causal 0,1 > "$OUT/splitbench.log" 2>&1
      echo "splitbench rc=$?"; cut -c1-200 "$OUT/splitbench.log" | grep -v "^sagejit" ;;
    splitlong)
      timeout 300 python3 bench/long_accuracy.py \
        --modes wgmma:fp32+fp32,wgmma:fp32+fp32+splitv,fp8pv:fp32+fp32+splitv > "$OUT/splitlong.log" 2>&1
      echo "splitlong rc=$?"; cat "$OUT/splitlong.log" ;;
    autobench)
      # pvi8+splitv (the wgmma default) beside its two bodies alone; the
      # bench data is Gaussian, so every head takes pvi8
      timeout 500 $cli bench --family wgmma --accum pvi8+splitv,pvi8,fp32+fp32+splitv \
        --head-dim 128,64 --causal 0,1 > "$OUT/autobench.log" 2>&1
      echo "autobench rc=$?"; cut -c1-200 "$OUT/autobench.log" | grep -v "^sagejit" ;;
    autolong)
      # accuracy at long N on Gaussian V, V with outlier tokens, and offset V
      timeout 400 python3 bench/long_accuracy.py --seq 4096,16384 --data gauss,v-outliers,v-offset \
        --modes wgmma:pvi8+splitv,wgmma:pvi8,wgmma:fp32+fp32+splitv > "$OUT/autolong.log" 2>&1
      echo "autolong rc=$?"; cat "$OUT/autolong.log" ;;
    sa2)
      # SageAttention2's own kernels on this card (bench/sa2; build them
      # first with bench/sa2/build.sh SA2_CSRC build-sa2/bin and carry
      # build-sa2/bin), then ours on the same shapes, two rounds
      for r in 1 2; do
        timeout 120 build-sa2/bin/sa2_sm90_bench --head-dim 128,64 --seq 1024,2048,4096,16384 --causal 0,1 2>&1 | grep -E "^(sa2|check)"
        timeout 200 $cli bench --family wgmma --head-dim 128,64 --seq 1024,2048,4096,16384 --causal 0,1 --no-progress 2>&1 | grep -E "^ +[0-9]"
      done > "$OUT/sa2.log" 2>&1
      timeout 200 build-sa2/bin/sa2_mma_bench --head-dim 128,64 --causal 0,1 >> "$OUT/sa2.log" 2>&1
      timeout 300 $cli bench --family fp16pv,fp8pv --accum fp32,fp32+fp16,fp32+fp32,pvi8 --head-dim 128,64 --causal 0,1 --no-progress 2>&1 | grep -E "^ +[0-9]" >> "$OUT/sa2.log"
      echo "sa2 done"; cut -c1-160 "$OUT/sa2.log" | grep -v "^check" ;;
    timeline)
      # the wgmma kernel's per-CTA timeline (bench/timeline; the output of
      # these instrumented kernels is wrong, so never with other steps' cache)
      python3 bench/timeline/make_templates.py kernel_templates /tmp/sj-timeline-tpl &&
        SAGEJIT_TEMPLATE_DIR=/tmp/sj-timeline-tpl SAGEJIT_PDL=0 \
        SAGEJIT_CACHE_DIR=$PWD/$build/test-cache/timeline \
        SAGEJIT_LIBRARY=$PWD/$build/libsagejit.so PYTHONPATH=$PWD/python \
        timeout 300 python3 bench/timeline/cta_timeline.py --csv "$OUT" > "$OUT/timeline.log" 2>&1
      echo "timeline rc=$?"; cat "$OUT/timeline.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
