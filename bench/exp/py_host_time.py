"""Host time per sageattn call from Python (the short path for repeated calls).

Tiny shapes, so the GPU finishes each call long before the host has queued
the next: the wall time of many back-to-back calls divided by their count
is the host time per call.  SDPA on the same tensors is the reference.
Prints one line per (method, shape): median over rounds of µs per call.

    PYTHONPATH=python python3 bench/exp/py_host_time.py [--calls 2000] [--rounds 7]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import sagejit


def per_call_us(fn, calls, rounds):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        res.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(res), min(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    for (b, h, n, d, causal, layout) in ((1, 8, 128, 64, False, "HND"),
                                         (1, 8, 128, 128, True, "HND"),
                                         (2, 8, 256, 128, False, "NHD")):
        shape = (b, h, n, d) if layout == "HND" else (b, n, h, d)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        fns = [("sagejit", lambda: sagejit.sageattn(
            q, k, v, tensor_layout=layout, is_causal=causal))]
        if layout == "HND":
            fns.append(("sdpa", lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=causal)))
        for name, fn in fns:
            med, best = per_call_us(fn, a.calls, a.rounds)
            print("%s %-8s B%d H%d N%d D%d causal%d %s: %.1f us/call "
                  "(best %.1f)" % (a.tag, name, b, h, n, d, causal, layout,
                                   med, best), flush=True)


if __name__ == "__main__":
    main()
