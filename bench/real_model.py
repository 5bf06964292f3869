#!/usr/bin/env python3
"""A real client: whole models whose attention runs through
``sagejit.sageattn`` in place of ``F.scaled_dot_product_attention``.

    python3 bench/real_model.py [--out OUTDIR] [--models llama,vit]

No weights can be downloaded on the benchmark machine, so the models are
randomly initialised (same seed for every run):

- llama: a transformers ``LlamaForCausalLM`` (hidden 1024, 16 query heads,
  4 KV heads -> head_dim 64, 4 layers, vocab 32000), causal, batch 2 x 2048
  tokens, fp16.  Run twice: with the default initialisation (std 0.02,
  nearly uniform attention) and with std 0.08 (sharper attention: a harder
  test of the quantization).
- vit: a timm ``vit_base_patch16_224`` (12 heads, head_dim 64, 197 tokens),
  non-causal, batch 32, fp16.

The patch is a context manager that replaces
``torch.nn.functional.scaled_dot_product_attention`` (which both libraries
call at run time) with a function that sends every call sagejit supports
(4-D CUDA fp16/bf16, no mask, no dropout) to ``sagejit.sageattn`` and the
rest to the original; it counts both, so a model that never reached sagejit
shows up.  Reported per model: relative L2 and cosine of the final hidden
states and the logits vs the same model with plain SDPA, top-1 agreement of
the logits, the same numbers for SDPA fp16 vs an fp32 copy of the model (the
noise floor fp16 already has), and the forward time of both.
"""

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
import traceback
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import sagejit  # noqa: E402


@contextlib.contextmanager
def sdpa_through_sagejit(**options: Any) -> Iterator[Counter]:
    """Routes F.scaled_dot_product_attention calls to sagejit.sageattn."""
    original = F.scaled_dot_product_attention
    counts: Counter = Counter()

    def mask_kind(mask: torch.Tensor, nq: int, nk: int) -> Any:
        """"none" (every key visible), "causal" (top-left lower triangle)
        or None, for a boolean or additive mask.  Reads the mask (a
        synchronization): counted as a mask check."""
        counts["mask checks"] += 1
        allowed = mask if mask.dtype == torch.bool else mask > -1e4
        allowed = allowed.expand(*allowed.shape[:-2], nq, nk)
        if bool(allowed.all()):
            return "none"
        tri = torch.ones(nq, nk, dtype=torch.bool,
                         device=mask.device).tril()
        if bool((allowed == tri).all()):
            return "causal"
        return None

    def patched(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: Any = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: Any = None,
                enable_gqa: bool = False, **kwargs: Any) -> torch.Tensor:
        why = None
        if attn_mask is not None and query.dim() == 4:
            kind = mask_kind(attn_mask, query.shape[-2], key.shape[-2])
            if kind is None:
                why = "attn_mask"
            else:
                is_causal, attn_mask = kind == "causal", None
        if why is not None:
            pass
        elif attn_mask is not None:
            why = "attn_mask"
        elif dropout_p:
            why = "dropout"
        elif kwargs:
            why = "kwargs"
        elif query.dim() != 4 or not query.is_cuda:
            why = "not 4-D CUDA"
        elif query.dtype not in (torch.float16, torch.bfloat16):
            why = "dtype"
        elif query.shape[-1] not in (32, 64, 96, 128, 256):
            why = "head_dim"
        elif query.shape[1] != key.shape[1] and not enable_gqa:
            why = "heads"
        elif query.stride(-1) != 1 or key.stride(-1) != 1 or \
                value.stride(-1) != 1:
            why = "strides"
        if why is None:
            counts["sagejit"] += 1
            return sagejit.sageattn(query, key, value, tensor_layout="HND",
                                    is_causal=bool(is_causal),
                                    sm_scale=scale, **options)
        counts["fallback: " + why] += 1
        kw = dict(kwargs)
        if enable_gqa:
            kw["enable_gqa"] = True
        return original(query, key, value, attn_mask=attn_mask,
                        dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                        **kw)

    F.scaled_dot_product_attention = patched
    try:
        yield counts
    finally:
        F.scaled_dot_product_attention = original


def compare(a: torch.Tensor, b: torch.Tensor) -> Dict[str, float]:
    a, b = a.double().flatten(), b.double().flatten()
    return {"rel_l2": ((a - b).norm() / b.norm()).item(),
            "cosine": (torch.dot(a, b) / (a.norm() * b.norm())).item()}


def top1(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(-1) == b.argmax(-1)).double().mean().item()


def timed(fn: Callable[[], Any], reps: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), \
            torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def run_pair(name: str, model: torch.nn.Module, model32: torch.nn.Module,
             inputs: Any, outputs: Callable[[Any], Tuple[torch.Tensor,
                                                          torch.Tensor]]
             ) -> Dict[str, Any]:
    """Runs model with SDPA and with sagejit, model32 with SDPA (fp32)."""
    with torch.inference_mode():
        hid_ref, log_ref = outputs(model(**inputs))
        with sdpa_through_sagejit() as counts:
            hid, log = outputs(model(**inputs))
        inputs32 = {k: (v.float() if v.is_floating_point() else v)
                    for k, v in inputs.items()}
        hid32, log32 = outputs(model32(**inputs32))
        ms_sdpa = timed(lambda: model(**inputs))
        with sdpa_through_sagejit():
            ms_sj = timed(lambda: model(**inputs))
    res = {
        "model": name,
        "calls": dict(counts),
        "hidden_vs_sdpa": compare(hid, hid_ref),
        "logits_vs_sdpa": compare(log, log_ref),
        "top1_agreement_vs_sdpa": top1(log, log_ref),
        "sdpa_fp16_vs_fp32": {"hidden": compare(hid_ref, hid32),
                              "logits": compare(log_ref, log32),
                              "top1": top1(log_ref, log32)},
        "sagejit_vs_fp32": {"logits": compare(log, log32),
                            "top1": top1(log, log32)},
        "forward_ms": {"sdpa": ms_sdpa, "sagejit": ms_sj},
        "finite": bool(torch.isfinite(log).all()),
    }
    if counts["sagejit"] == 0:
        res["error"] = "no attention call reached sagejit"
    return res


def llama(args: argparse.Namespace, init_std: float) -> Dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816,
                      num_attention_heads=16, num_key_value_heads=4,
                      num_hidden_layers=4, vocab_size=32000,
                      max_position_embeddings=max(4096, args.seq),
                      initializer_range=init_std)
    try:
        cfg._attn_implementation = "sdpa"
    except Exception:
        pass  # the default is SDPA where torch has it
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg).eval()
    model32 = copy.deepcopy(base).cuda().float()
    model = base.cuda().half()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq),
                        generator=torch.Generator().manual_seed(1)).cuda()

    def outputs(out: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        return out.hidden_states[-1], out.logits

    name = "transformers LlamaForCausalLM (random init std %.2f; hidden " \
           "1024, 16 q / 4 kv heads, D=64, 4 layers), B=%d N=%d causal fp16" \
           % (init_std, args.batch, args.seq)
    return _llama_run(name, model, model32, ids, outputs)


def _llama_run(name: str, model: Any, model32: Any, ids: torch.Tensor,
               outputs: Callable[[Any], Tuple[torch.Tensor, torch.Tensor]]
               ) -> Dict[str, Any]:
    class Wrap(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: torch.Tensor) -> Any:
            return self.m(input_ids=x, output_hidden_states=True,
                          use_cache=False)

    return run_pair(name, Wrap(model), Wrap(model32), {"x": ids}, outputs)


def vit(args: argparse.Namespace) -> Dict[str, Any]:
    import timm

    torch.manual_seed(0)
    base = timm.create_model("vit_base_patch16_224", pretrained=False).eval()
    model32 = copy.deepcopy(base).cuda().float()
    model = base.cuda().half()
    x = torch.randn(args.vit_batch, 3, 224, 224,
                    generator=torch.Generator().manual_seed(2)).cuda()

    class Wrap(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: torch.Tensor) -> Any:
            feats = self.m.forward_features(x)
            return feats, self.m.forward_head(feats)

    def outputs(out: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        return out[0], out[1]

    name = "timm vit_base_patch16_224 (random init; 12 heads, D=64, 197 " \
           "tokens), B=%d non-causal fp16" % args.vit_batch
    return run_pair(name, Wrap(model), Wrap(model32), {"x": x.half()},
                    outputs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--models", default="llama,vit")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--vit-batch", type=int, default=32)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("real_model: SKIPPED: no CUDA device")
        return 0
    results: List[Dict[str, Any]] = []
    jobs: List[Tuple[str, Callable[[], Dict[str, Any]]]] = []
    for m in args.models.split(","):
        if m == "llama":
            jobs.append(("llama std 0.02", lambda: llama(args, 0.02)))
            jobs.append(("llama std 0.08", lambda: llama(args, 0.08)))
        elif m == "vit":
            jobs.append(("vit", lambda: vit(args)))
    for label, job in jobs:
        t0 = time.time()
        try:
            r = job()
        except Exception as e:
            traceback.print_exc()
            r = {"model": label, "error": "%s: %s" % (type(e).__name__, e)}
        r["seconds"] = round(time.time() - t0, 1)
        results.append(r)
        torch.cuda.empty_cache()
        if "logits_vs_sdpa" in r:
            print("%s\n  attention calls: %s\n  sagejit vs SDPA: logits rel "
                  "L2 %.3e cos %.6f, hidden rel L2 %.3e, top-1 agreement "
                  "%.4f\n  (SDPA fp16 vs fp32: logits rel L2 %.3e, top-1 "
                  "%.4f; sagejit vs fp32: rel L2 %.3e, top-1 %.4f)\n  "
                  "forward: SDPA %.2f ms, sagejit %.2f ms%s" % (
                      r["model"], r["calls"],
                      r["logits_vs_sdpa"]["rel_l2"],
                      r["logits_vs_sdpa"]["cosine"],
                      r["hidden_vs_sdpa"]["rel_l2"],
                      r["top1_agreement_vs_sdpa"],
                      r["sdpa_fp16_vs_fp32"]["logits"]["rel_l2"],
                      r["sdpa_fp16_vs_fp32"]["top1"],
                      r["sagejit_vs_fp32"]["logits"]["rel_l2"],
                      r["sagejit_vs_fp32"]["top1"],
                      r["forward_ms"]["sdpa"], r["forward_ms"]["sagejit"],
                      "  ERROR: " + r["error"] if "error" in r else ""),
                  flush=True)
        else:
            print("%s: ERROR %s" % (label, r.get("error")), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "real_model.json"), "w") as f:
            json.dump(results, f, indent=1)
    parts = []
    for r in results:
        short = r["model"].split(" (")[0]
        if "logits_vs_sdpa" in r and "error" not in r:
            parts.append("%s: logits rel L2 %.2e, top-1 %.3f" % (
                short, r["logits_vs_sdpa"]["rel_l2"],
                r["top1_agreement_vs_sdpa"]))
        else:
            parts.append("%s: error" % short)
    print("real_model: " + "; ".join(parts))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
