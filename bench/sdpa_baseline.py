#!/usr/bin/env python3
"""SDPA baselines (cuDNN and flash backends) for the shapes of `sagejit bench`.

Same method as sj_bench: CUDA events, warm-up, median of many runs; TOPS with
the same FLOP count (4*B*H*N*N*D, halved for causal with equal lengths).  The
timed calls are queued back to back, each between its own pair of events, and
synchronized once (GPU time; the Python dispatch of a call overlaps the
previous call), as `sagejit bench` and bench/sa2 do; --sync-each waits for
every call, so that each time also holds the host's launch latency.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def bench(fn, warmup, iters, sync_each=False):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        if sync_each:
            b.synchronize()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def spin_up(seconds=0.5):
    """Keep the GPU busy for a while before the first timing: an idle GPU
    starts at a low clock, and the first shape (a 1K call is ~0.15 ms, its
    warm-up a few ms) was timed at it (seen on an H100, 2026-11-28: 182
    TOPS for D=128 N=1K as the first shape, 433-451 when warmed)."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t = torch.cuda.Event(enable_timing=True)
    u = torch.cuda.Event(enable_timing=True)
    t.record()
    while True:
        for _ in range(20):
            x = (x @ x).clamp_(-1, 1)
        u.record()
        u.synchronize()
        if t.elapsed_time(u) >= seconds * 1e3:
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--seq", default="1024,4096,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="fp16", help="fp16, bf16 or both (fp16,bf16)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backends", default="cudnn,flash", help="cudnn, flash or both")
    ap.add_argument("--sync-each", action="store_true",
                    help="wait for each timed call (host launch latency included)")
    args = ap.parse_args()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    for dn in args.dtype.split(","):
        if dn not in dtypes:
            ap.error(f"--dtype: {dn!r} is not fp16 or bf16")
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    for bn in args.backends.split(","):
        if bn not in backends:
            ap.error(f"--backends: {bn!r} is not cudnn or flash")
    rows = []
    dev = torch.cuda.get_device_name()
    spin_up()
    for dn in args.dtype.split(","):
        for d in [int(x) for x in args.head_dim.split(",")]:
            for n in [int(x) for x in args.seq.split(",")]:
                for c in [int(x) for x in args.causal.split(",")]:
                    shape = (args.batch, args.heads, n, d)
                    q = torch.randn(shape, device="cuda", dtype=dtypes[dn])
                    k = torch.randn(shape, device="cuda", dtype=dtypes[dn])
                    v = torch.randn(shape, device="cuda", dtype=dtypes[dn])
                    flops = 4.0 * args.batch * args.heads * n * n * d
                    if c:
                        flops = 4.0 * args.batch * args.heads * d * (n * (n + 1) / 2)
                    for name in args.backends.split(","):
                        be = backends[name]
                        try:
                            with sdpa_kernel(be):
                                ms = bench(lambda: F.scaled_dot_product_attention(
                                    q, k, v, is_causal=bool(c)), args.warmup, args.iters,
                                    args.sync_each)
                            tops = flops / (ms * 1e-3) / 1e12
                        except RuntimeError as e:
                            ms, tops = float("nan"), float("nan")
                        rows.append({"backend": name, "dtype": dn, "d": d, "n": n,
                                     "causal": c, "ms": ms, "tops": tops})
                        print(f"sdpa-{name:5s} {dn} B{args.batch} H{args.heads} D{d} N{n:6d} "
                              f"causal{c}: {ms:8.3f} ms {tops:7.1f} TOPS", flush=True)
    print(json.dumps({"device": dev, "torch": torch.__version__,
                      "timing": "sync_each" if args.sync_each else "back_to_back",
                      "results": rows}))


if __name__ == "__main__":
    main()
