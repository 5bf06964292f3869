#!/usr/bin/env python3
"""long_accuracy.py: accuracy of each family and P.V accumulation at long
sequences, where accumulation precision shows (sagejit check stops at 4K).

Random fp16 Q/K/V (K with a per-channel bias, as in sagejit check), B=1,
H=8, D=128, non-causal and causal; the reference is fp32 attention in
PyTorch.  Prints relative L2 and cosine per (family, accumulation, N).
--data picks harder inputs too: "sharp" (Q x 3: peaked attention),
"v-outliers" (0.1 % of the V tokens x 20: a channel's scale set by a few
tokens), "v-offset" (a per-channel offset on V, as smooth_v expects).

    SAGEJIT_LIBRARY=.../libsagejit.so python3 bench/long_accuracy.py
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import sagejit  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", default="4096,16384,32768")
    ap.add_argument("--modes", default="wgmma:fp32+fp32,fp8pv:fp32+fp32,fp8pv:fp32")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--data", default="gauss",
                    help="comma list of gauss, sharp, v-outliers, v-offset")
    args = ap.parse_args()
    torch.manual_seed(0)
    h, d = args.heads, args.head_dim
    for data, n in [(x, int(y)) for x in args.data.split(",") for y in args.seq.split(",")]:
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.float16)
        k = torch.randn(1, h, n, d, device="cuda", dtype=torch.float16)
        k = k + 4.0 * torch.randn(1, h, 1, d, device="cuda", dtype=torch.float16)
        v = torch.randn(1, h, n, d, device="cuda", dtype=torch.float16)
        if data == "sharp":
            q = q * 3
        elif data == "v-outliers":
            tok = torch.rand(1, h, n, 1, device="cuda") < 1e-3
            v = torch.where(tok, v * 20, v)
        elif data == "v-offset":
            v = v + 2.0 * torch.randn(1, h, 1, d, device="cuda", dtype=torch.float16)
        elif data != "gauss":
            sys.exit(f"unknown --data {data}")
        for causal in (False, True):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 is_causal=causal)
            for mode in args.modes.split(","):
                fam, acc = mode.split(":")
                o = sagejit.sageattn(q, k, v, is_causal=causal, family=fam,
                                     pv_accum_dtype=acc).float()
                rel = ((o - ref).norm() / ref.norm()).item()
                cos = F.cosine_similarity(o.flatten(), ref.flatten(), dim=0).item()
                print(f"{data:10s} N {n:6d} causal {int(causal)} {fam:6s} {acc:16s} "
                      f"rel_l2 {rel:.4e} cos {cos:.6f}", flush=True)
            del ref


if __name__ == "__main__":
    main()
