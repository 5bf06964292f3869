#!/usr/bin/env python3
"""Variable-length batches: sagejit.sageattn_varlen on sequences drawn from
a long-tailed distribution, against the padded dense call (sagejit and
SDPA-cuDNN over [B, H, max_len, D]) and against PyTorch's own varlen paths
where they exist (nested-tensor SDPA, torch.nn.attention.varlen).

Same method as bench_attention.py: one process, the same inputs, CUDA
events, warm-up, median.  Useful TOPS count only real tokens:
sum over sequences of 4*H*len^2*D (halved for causal).  Accuracy: the
varlen output against fp32 SDPA run on each sequence alone.

    python3 bench/bench_varlen.py [--seqs 48] [--heads 32] [--head-dim 128]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0] + "/python")
import sagejit  # noqa: E402


def timeit(fn, warmup=3, iters=15):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=48)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    # long-tailed: log-normal around ~600 tokens, clipped to [16, max]
    raw = torch.exp(torch.randn(args.seqs, generator=g) * 1.3 + math.log(600))
    lens = [int(min(max(16, x), args.max_len)) for x in raw.tolist()]
    lens[0] = args.max_len  # one sequence at the maximum: the worst padding
    H, HK, D = args.heads, args.heads_kv, args.head_dim
    total, maxlen = sum(lens), max(lens)
    dev, dt = "cuda", torch.float16
    q = torch.randn(total, H, D, device=dev, dtype=dt)
    k = torch.randn(total, HK, D, device=dev, dtype=dt)
    v = torch.randn(total, HK, D, device=dev, dtype=dt)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    cu_d = cu.to(dev)
    print("varlen: %d sequences, lengths min %d median %d max %d, total %d "
          "tokens (padded dense: %d, %.1fx), H=%d/%d D=%d fp16"
          % (len(lens), min(lens), int(statistics.median(lens)), maxlen, total,
             len(lens) * maxlen, len(lens) * maxlen / total, H, HK, D))
    rows = []
    for causal in (False, True):
        pairs = sum((n * (n + 1) / 2 if causal else n * n) for n in lens)
        flops = 4.0 * H * D * pairs

        def report(name, fn, padded=False):
            try:
                ms = timeit(fn, 1, 5) if padded else timeit(fn)
                tops = flops / (ms * 1e-3) / 1e12
                print("  causal=%d %-34s %9.3f ms  %7.1f useful TOPS"
                      % (causal, name, ms, tops), flush=True)
                rows.append({"causal": causal, "method": name, "ms": ms,
                             "useful_tops": tops})
            except Exception as e:  # a method this torch lacks
                print("  causal=%d %-34s unavailable: %s: %s"
                      % (causal, name, type(e).__name__, str(e)[:120]))
                rows.append({"causal": causal, "method": name,
                             "error": "%s: %s" % (type(e).__name__, e)})

        report("sagejit varlen (fp8pv)", lambda: sagejit.sageattn_varlen(
            q, k, v, cu_d, cu_d, maxlen, maxlen, is_causal=causal,
            validate_cu_seqlens=False))
        report("sagejit varlen (fp16pv)", lambda: sagejit.sageattn_varlen(
            q, k, v, cu_d, cu_d, maxlen, maxlen, is_causal=causal,
            family="fp16pv", validate_cu_seqlens=False))
        # the padded dense batch [B, H, max, D] (padding is computed too)
        B = len(lens)
        qp = torch.zeros(B, H, maxlen, D, device=dev, dtype=dt)
        kp = torch.zeros(B, HK, maxlen, D, device=dev, dtype=dt)
        vp = torch.zeros(B, HK, maxlen, D, device=dev, dtype=dt)
        for i, n in enumerate(lens):
            s = int(cu[i])
            qp[i, :, :n] = q[s:s + n].transpose(0, 1)
            kp[i, :, :n] = k[s:s + n].transpose(0, 1)
            vp[i, :, :n] = v[s:s + n].transpose(0, 1)
        report("sagejit dense, padded", lambda: sagejit.sageattn(
            qp, kp, vp, is_causal=causal), padded=True)
        kr = kp.repeat_interleave(H // HK, dim=1)
        vr = vp.repeat_interleave(H // HK, dim=1)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            report("sdpa-cudnn dense, padded", lambda: F.scaled_dot_product_attention(
                qp, kr, vr, is_causal=causal), padded=True)
        del qp, kp, vp, kr, vr
        # PyTorch varlen paths, where this torch has them
        try:
            nq = torch.nested.nested_tensor_from_jagged(q, offsets=cu_d.long())
            kk = k.repeat_interleave(H // HK, dim=1)
            vv = v.repeat_interleave(H // HK, dim=1)
            nk = torch.nested.nested_tensor_from_jagged(kk, offsets=cu_d.long())
            nv = torch.nested.nested_tensor_from_jagged(vv, offsets=cu_d.long())
            report("sdpa nested (jagged) varlen", lambda: F.scaled_dot_product_attention(
                nq.transpose(1, 2), nk.transpose(1, 2), nv.transpose(1, 2),
                is_causal=causal))
        except Exception as e:
            print("  causal=%d sdpa nested: unavailable: %s" % (causal, e))
        try:
            from torch.nn.attention import varlen as tv
            kk = k.repeat_interleave(H // HK, dim=1)
            vv = v.repeat_interleave(H // HK, dim=1)
            report("torch.nn.attention.varlen", lambda: tv.varlen_attn(
                q, kk, vv, cu_d, cu_d, maxlen, maxlen, is_causal=causal))
        except Exception as e:
            print("  causal=%d torch varlen_attn: unavailable: %s: %s"
                  % (causal, type(e).__name__, str(e)[:100]))
        # accuracy on a few sequences (the longest included)
        o = sagejit.sageattn_varlen(q, k, v, cu_d, cu_d, maxlen, maxlen,
                                    is_causal=causal)
        num = den = 0.0
        for i in (0, 1, 2, len(lens) - 1):
            s, n = int(cu[i]), lens[i]
            qs = q[s:s + n].transpose(0, 1).float()[None]
            ks = k[s:s + n].transpose(0, 1).float().repeat_interleave(H // HK, 0)[None]
            vs = v[s:s + n].transpose(0, 1).float().repeat_interleave(H // HK, 0)[None]
            ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)[0]
            got = o[s:s + n].transpose(0, 1).float()
            num += float(((got - ref) ** 2).sum())
            den += float((ref ** 2).sum())
        rel = math.sqrt(num / den)
        print("  causal=%d accuracy (4 sequences incl. the longest, fp8pv): "
              "rel L2 %.3e" % (causal, rel))
        rows.append({"causal": causal, "method": "accuracy", "rel_l2": rel})
    print("RESULT " + json.dumps({"lens": lens, "rows": rows}))


if __name__ == "__main__":
    main()
