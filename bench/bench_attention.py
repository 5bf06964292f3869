#!/usr/bin/env python3
"""Attention throughput and accuracy: sagejit vs PyTorch SDPA (flash and
cuDNN backends) vs SageAttention (when importable), same inputs, same
process.

    python3 bench/bench_attention.py --out OUTDIR [--quick]

Timing: CUDA events around each call (what a PyTorch user calls: for
sagejit that is ``sagejit.sageattn``, quantization included), the calls
queued back to back after a warm-up; the median of the timed calls.  Host time: the median wall time of
the Python call itself (before synchronizing), i.e. the per-call CPU
overhead.  TOPS = 4*B*H*N*N*D / time, halved when causal.

Accuracy: each method's output against an fp32 SDPA reference computed on a
slice of the same inputs (batch 0, the first 4 heads: the reference costs no
more than that), relative L2 and cosine.

Writes into OUTDIR: results.csv (one row per method and shape),
results.json (the same plus the environment), tops_D{d}_causal{c}.png (TOPS
per N, one line per method), summary.md (TOPS and accuracy tables).  Every
shape and method is tried on its own: a failure is recorded and the run goes
on.  The last line printed is a one-line summary.
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import sagejit  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # torch < 2.3
    SDPBackend = sdpa_kernel = None  # type: ignore[assignment]

try:
    from sageattention import sageattn as sage_sageattn  # type: ignore
    SAGE_ERROR = ""
except Exception as e:  # pragma: no cover - depends on the machine
    sage_sageattn = None
    SAGE_ERROR = "%s: %s" % (type(e).__name__, e)

REF_BATCH, REF_HEADS = 1, 4


def flops(b: int, h: int, n: int, d: int, causal: bool) -> float:
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def iterations(n: int, quick: bool) -> Tuple[int, int]:
    """(warm-up, timed) calls for sequence length n."""
    if quick:
        return (2, 5) if n >= 8192 else (3, 10)
    if n >= 16384:
        return 3, 10
    if n >= 8192:
        return 5, 20
    return 5, 30


def time_fn(fn: Callable[[], Any], warmup: int, iters: int
            ) -> Tuple[float, float]:
    """(median ms on the GPU, median host µs per call).

    The calls are queued back to back, as in a model, each between its own
    pair of CUDA events, with one synchronization at the end: when the host
    keeps ahead of the GPU a call's time is its GPU time; when it does not,
    the idle gap shows up in the time (it is what a user would get).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    host = []
    for i in range(iters):
        starts[i].record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        ends[i].record()
    torch.cuda.synchronize()
    gpu = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(gpu), statistics.median(host)


def methods(families: List[str]) -> Dict[str, Callable[..., Any]]:
    """name -> fn(q, k, v, causal) on HND tensors."""
    out: Dict[str, Callable[..., Any]] = {}
    for fam in families:
        name = "sagejit" if fam == "auto" else "sagejit-" + fam
        out[name] = (lambda f: lambda q, k, v, c: sagejit.sageattn(
            q, k, v, tensor_layout="HND", is_causal=c, family=f))(fam)
    if sdpa_kernel is not None:
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(q, k, v, c, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v,
                                                          is_causal=c)
            out[name] = run
    else:
        out["sdpa"] = lambda q, k, v, c: F.scaled_dot_product_attention(
            q, k, v, is_causal=c)
    if sage_sageattn is not None:
        out["sageattention"] = lambda q, k, v, c: sage_sageattn(
            q, k, v, tensor_layout="HND", is_causal=c)
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool) -> torch.Tensor:
    """fp32 attention on the slice [:REF_BATCH, :REF_HEADS]."""
    qs, ks, vs = (t[:REF_BATCH, :REF_HEADS].float() for t in (q, k, v))
    if sdpa_kernel is not None:
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)


def accuracy(o: torch.Tensor, ref: torch.Tensor) -> Tuple[float, float]:
    o = o[:REF_BATCH, :REF_HEADS].double().flatten()
    r = ref.double().flatten()
    rel = ((o - r).norm() / r.norm()).item()
    cos = (torch.dot(o, r) / (o.norm() * r.norm())).item()
    return rel, cos


def environment() -> Dict[str, Any]:
    env: Dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "capability": "%d.%d" % torch.cuda.get_device_capability(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": sys.version.split()[0],
        "sageattention": "available" if sage_sageattn is not None
        else "not importable (%s)" % SAGE_ERROR,
    }
    try:
        info = sagejit.info()
        env["sagejit"] = info.get("library", {}).get("version")
        env["sagejit_library"] = info.get("library", {}).get("path")
        env["nvrtc"] = info.get("nvrtc", {}).get("version")
        env["driver"] = info.get("driver", {}).get("version")
        devs = info.get("devices") or [{}]
        env["sagejit_target"] = devs[0].get("target")
    except Exception as e:
        env["sagejit"] = "error: %s" % e
    env["sagejit_custom_op"] = sagejit.uses_custom_op()
    return env


def plot(rows: List[Dict[str, Any]], out: str) -> List[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print("no charts: matplotlib unavailable (%s)" % e)
        return []
    files = []
    os.makedirs(out, exist_ok=True)
    keys = sorted({(r["D"], r["causal"]) for r in rows})
    for d, c in keys:
        try:
            path = _chart(plt, rows, out, d, c)
        except Exception as e:
            print("chart D=%d causal=%d failed: %s" % (d, int(c), e))
            continue
        if path:
            files.append(path)
    return files


def _chart(plt: Any, rows: List[Dict[str, Any]], out: str, d: int,
           c: bool) -> Optional[str]:
    """One TOPS-per-N chart for head dim d and causal c; its path."""
    sel = [r for r in rows if r["D"] == d and r["causal"] == c
           and r["tops"] == r["tops"]]  # drop NaN
    if not sel:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in sorted({r["method"] for r in sel}):
        pts = sorted((r["N"], r["tops"]) for r in sel if r["method"] == m)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=m)
    ax.set_xscale("log", base=2)
    ns = sorted({r["N"] for r in sel})
    ax.set_xticks(ns)
    ax.set_xticklabels(["%dK" % (n // 1024) if n >= 1024 else str(n)
                        for n in ns])
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("TOPS (4·B·H·N²·D%s / time)" % (" / 2" if c else ""))
    b, h = sel[0]["B"], sel[0]["H"]
    ax.set_title("%s, B=%d H=%d D=%d %s, %s" % (
        torch.cuda.get_device_name(), b, h, d,
        "causal" if c else "non-causal", sel[0]["dtype"]))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out, "tops_D%d_causal%d.png" % (d, int(c)))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_md(rows: List[Dict[str, Any]], env: Dict[str, Any]) -> str:
    lines = ["# bench_attention results", "",
             "Device: %s (sm %s), torch %s, CUDA %s, sagejit %s (target %s, "
             "custom op %s), SageAttention: %s." % (
                 env["device"], env["capability"], env["torch"],
                 env["cuda"], env.get("sagejit"), env.get("sagejit_target"),
                 env.get("sagejit_custom_op"), env["sageattention"]), ""]
    ms = []
    for r in rows:
        if r["method"] not in ms:
            ms.append(r["method"])
    shapes = []
    for r in rows:
        key = (r["D"], r["causal"], r["N"])
        if key not in shapes:
            shapes.append(key)
    by = {(r["method"], r["D"], r["causal"], r["N"]): r for r in rows}

    def table(title: str, fmt: Callable[[Dict[str, Any]], str]) -> None:
        lines.extend(["## " + title, "",
                      "| D | causal | N | " + " | ".join(ms) + " |",
                      "| --- | --- | --- | " + " | ".join("---" for _ in ms)
                      + " |"])
        for d, c, n in shapes:
            cells = []
            for m in ms:
                r = by.get((m, d, c, n))
                cells.append(fmt(r) if r else "")
            lines.append("| %d | %d | %d | %s |" % (d, int(c), n,
                                                   " | ".join(cells)))
        lines.append("")

    def tops(r: Dict[str, Any]) -> str:
        return "%.0f" % r["tops"] if r["tops"] == r["tops"] else "err"

    def acc(r: Dict[str, Any]) -> str:
        if r["rel_l2"] != r["rel_l2"]:
            return "err" if r["error"] else "n/a"
        return "%.2e / %.5f" % (r["rel_l2"], r["cosine"])

    def host(r: Dict[str, Any]) -> str:
        return "%.0f" % r["host_us"] if r["host_us"] == r["host_us"] else ""

    table("TOPS (median; higher is better)", tops)
    table("Accuracy vs fp32 SDPA (relative L2 / cosine; batch 0, heads 0-3)",
          acc)
    table("Host time per call, µs (median wall time of the Python call)",
          host)
    errs = [r for r in rows if r["error"]]
    if errs:
        lines += ["## Errors", ""]
        for r in errs:
            lines.append("- %s D=%d causal=%d N=%d: %s" % (
                r["method"], r["D"], int(r["causal"]), r["N"], r["error"]))
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-out", help="output folder")
    ap.add_argument("--quick", action="store_true",
                    help="D=128, N in 1K,4K, fewer iterations")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--families", default="auto,fp16pv",
                    help="sagejit families to time (auto = the device's "
                         "default; fp8pv on sm_89 and newer)")
    ap.add_argument("--methods", default="",
                    help="comma-separated subset of method names")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="stop starting new shapes after this many seconds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_attention: SKIPPED: no CUDA device")
        return 0
    if args.quick:
        args.head_dims, args.seqs = "128", "1024,4096"
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    fams = [f for f in args.families.split(",") if f]
    if torch.cuda.get_device_capability() < (8, 9):
        fams = [f for f in fams if f != "fp8pv"]
    table = methods(fams)
    if args.methods:
        keep = set(args.methods.split(","))
        table = {k: v for k, v in table.items() if k in keep}
    env = environment()
    print("environment:", json.dumps(env))
    print("methods:", ", ".join(table))
    rows: List[Dict[str, Any]] = []
    b, h = args.batch, args.heads
    skipped_for_time = 0
    for d in [int(x) for x in args.head_dims.split(",")]:
        for c in [bool(int(x)) for x in args.causal.split(",")]:
            for n in [int(x) for x in args.seqs.split(",")]:
                if time.time() - t_start > args.budget_s:
                    skipped_for_time += 1
                    continue
                g = torch.Generator(device="cuda").manual_seed(n * 7 + d)
                shape = (b, h, n, d)
                try:
                    q, k, v = (torch.randn(shape, generator=g, device="cuda",
                                           dtype=dtype) for _ in range(3))
                    ref = reference(q, k, v, c)
                except Exception as e:
                    print("shape B%d H%d N%d D%d: inputs failed: %s"
                          % (b, h, n, d, e))
                    torch.cuda.empty_cache()
                    continue
                warm, iters = iterations(n, args.quick)
                for name, fn in table.items():
                    row: Dict[str, Any] = {
                        "method": name, "dtype": args.dtype, "B": b, "H": h,
                        "N": n, "D": d, "causal": c, "ms": float("nan"),
                        "tops": float("nan"), "host_us": float("nan"),
                        "rel_l2": float("nan"), "cosine": float("nan"),
                        "error": ""}
                    try:
                        o = fn(q, k, v, c)
                        torch.cuda.synchronize()
                        row["rel_l2"], row["cosine"] = accuracy(o, ref)
                        del o
                        ms, host = time_fn(lambda: fn(q, k, v, c), warm,
                                           iters)
                        row["ms"], row["host_us"] = ms, host
                        row["tops"] = flops(b, h, n, d, c) / (ms * 1e-3) / 1e12
                    except Exception as e:
                        row["error"] = "%s: %s" % (type(e).__name__,
                                                   str(e).splitlines()[0]
                                                   if str(e) else "")
                        if os.environ.get("BENCH_TRACE"):
                            traceback.print_exc()
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                    rows.append(row)
                    print("%-15s D%-3d causal%d N%6d: %8.3f ms %7.1f TOPS "
                          "host %6.0f us  relL2 %.2e cos %.5f %s" % (
                              name, d, int(c), n, row["ms"], row["tops"],
                              row["host_us"], row["rel_l2"], row["cosine"],
                              row["error"]), flush=True)
                q = k = v = ref = None  # free before the next shape
                torch.cuda.empty_cache()
    fields = ["method", "dtype", "B", "H", "N", "D", "causal", "ms", "tops",
              "host_us", "rel_l2", "cosine", "error"]
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: (int(r[k]) if k == "causal" else r[k])
                        for k in fields})
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"environment": env, "args": vars(args),
                   "results": [{k: (None if isinstance(v, float)
                                    and math.isnan(v) else v)
                                for k, v in r.items()} for r in rows]},
                  f, indent=1)
    charts = plot(rows, args.out)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary_md(rows, env))
    errors = sum(1 for r in rows if r["error"])
    best = {}
    for r in rows:
        if r["tops"] == r["tops"]:
            best[r["method"]] = max(best.get(r["method"], 0.0), r["tops"])
    print("bench_attention: %d measurements, %d errors, %d shapes skipped for "
          "time, %d charts, %.0f s; peak TOPS %s -> %s" % (
              len(rows), errors, skipped_for_time, len(charts),
              time.time() - t_start,
              ", ".join("%s %.0f" % kv for kv in best.items()) or "none",
              args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
