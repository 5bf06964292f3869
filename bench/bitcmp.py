#!/usr/bin/env python3
"""bitcmp.py save|cmp FILE: run sagejit.sageattn over a set of cases (fixed
seeds) and save O and LSE, or compare them bit for bit with FILE.

For changes meant to leave every output bit unchanged (a refactor, a
cheaper form of the same arithmetic): run it once with the old templates
and once with the new, each with its own kernel cache, e.g.

  SAGEJIT_TEMPLATE_DIR=/tmp/old_templates SAGEJIT_CACHE_DIR=/tmp/c_old \
      python3 bench/bitcmp.py save /tmp/base.pt
  SAGEJIT_CACHE_DIR=/tmp/c_new python3 bench/bitcmp.py cmp /tmp/base.pt

(the old templates: `git show REV:kernel_templates/F` for each file).  The
cases cover the three families, fp16 and bf16, both layouts, GQA, causal,
head dims 32-256, the three granularities, smooth_v, lengths past the K
sampling threshold and tails, and V with outlier tokens in every other
head (so the wgmma default runs both of its bodies).  Needs a GPU and
PyTorch."""
import os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sagejit

mode, path = sys.argv[1], sys.argv[2]
# (family, accum, gran, dtype, B, Hq, Hkv, Nq, Nkv, D, causal, layout, smooth_v)
cases = [
    ("wgmma", None, None, torch.float16, 2, 8, 8, 1500, 1500, 128, False, "HND", False),
    ("wgmma", None, None, torch.bfloat16, 1, 8, 2, 777, 2300, 128, True, "NHD", False),
    ("wgmma", None, "per_block", torch.float16, 2, 4, 4, 300, 1100, 64, False, "HND", False),
    ("wgmma", None, None, torch.float16, 1, 4, 4, 1024, 4096, 64, True, "HND", False),
    ("wgmma", "fp32+fp32", "per_warp", torch.float16, 1, 4, 2, 513, 1300, 128, False, "NHD", True),
    ("wgmma", "pvi8", None, torch.float16, 2, 4, 4, 1000, 1000, 256, False, "HND", False),
    ("wgmma", "pv16", None, torch.bfloat16, 1, 4, 4, 600, 1200, 128, False, "HND", True),
    ("fp16pv", None, None, torch.float16, 2, 8, 2, 1100, 1100, 128, True, "HND", False),
    ("fp16pv", None, "per_block", torch.bfloat16, 1, 4, 4, 300, 2000, 64, False, "NHD", False),
    ("fp8pv", None, None, torch.float16, 1, 8, 8, 1500, 1500, 128, False, "HND", False),
    ("fp8pv", "pvi8", "per_warp", torch.float16, 2, 4, 4, 700, 1400, 96, True, "HND", False),
    ("fp8pv", "fp32+fp16", None, torch.bfloat16, 1, 4, 2, 200, 333, 32, False, "NHD", False),
]
res = {}
for i, (fam, acc, gran, dt, B, Hq, Hk, Nq, Nk, D, causal, lay, sv) in enumerate(cases):
    g = torch.Generator(device="cuda").manual_seed(100 + i)
    def mk(h, n, kbias=False, outl=False):
        shp = (B, h, n, D) if lay == "HND" else (B, n, h, D)
        x = torch.randn(shp, device="cuda", generator=g)
        if kbias:
            x = x + torch.linspace(-2, 3, D, device="cuda")
        if outl:  # outlier tokens in the odd heads: split V there
            if lay == "HND":
                x[:, 1::2, ::97, :] *= 30
            else:
                x[:, ::97, 1::2, :] *= 30
        return x.to(dt)
    q = mk(Hq, Nq); k = mk(Hk, Nk, kbias=True); v = mk(Hk, Nk, outl=True)
    opts = dict(family=fam)
    if acc: opts["pv_accum_dtype"] = acc
    if gran: opts["qk_quant_gran"] = gran
    if sv: opts["smooth_v"] = True
    o, lse = sagejit.sageattn(q, k, v, tensor_layout=lay, is_causal=causal, return_lse=True, **opts)
    torch.cuda.synchronize()
    res[i] = (o.cpu(), lse.cpu())
if mode == "save":
    torch.save(res, path)
    print("saved", len(res), "cases")
else:
    ref = torch.load(path)
    bad = 0
    for i in res:
        o, l = res[i]; o0, l0 = ref[i]
        same_o = torch.equal(o.view(torch.int16), o0.view(torch.int16))
        same_l = torch.equal(l.view(torch.int32), l0.view(torch.int32))
        d = (o.float() - o0.float()).abs().max().item()
        print(f"case {i} {cases[i][0]} {cases[i][1]} D={cases[i][9]}: O {'same' if same_o else 'DIFF'} LSE {'same' if same_l else 'DIFF'} max|dO|={d:.3g}")
        bad += (not same_o) + (not same_l)
    print("bitcmp:", "all identical" if bad == 0 else f"{bad} differences")
