#!/usr/bin/env python3
"""Time to the first attention result in a new process.

    python3 bench/first_call.py [--out OUTDIR] [--repeats 3]

Each measurement is a fresh Python process that imports torch, makes the
inputs on the GPU and synchronizes (not timed), then times, with the wall
clock: ``import sagejit`` + the first ``sagejit.sageattn`` call +
``torch.cuda.synchronize()``.  It also times the second call in the same
process (the steady state) for comparison.

- cold: an empty kernel cache directory (every kernel is compiled by NVRTC);
- warm: a new process on the cache the cold run filled (kernels are loaded
  from disk, nothing is compiled);
- sageattention: the same around ``from sageattention import sageattn`` and
  its first call, when the package is importable;
- sdpa: the first ``F.scaled_dot_product_attention`` call (no import), for
  scale.

The library's other cache layers are disabled (SAGEJIT_CACHE_PATH="") so
that "cold" really compiles.  Prints a table and a one-line summary;
writes first_call.json into --out when given.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, "..", "python"))

CHILD = r"""
import json, sys, time
import torch
b, h, n, d, causal, what = {b}, {h}, {n}, {d}, {causal}, {what!r}
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16)
           for _ in range(3))
torch.cuda.synchronize()
t0 = time.perf_counter()
if what == "sagejit":
    import sagejit
    fn = lambda: sagejit.sageattn(q, k, v, tensor_layout="HND",
                                  is_causal=causal)
elif what == "sageattention":
    from sageattention import sageattn
    fn = lambda: sageattn(q, k, v, tensor_layout="HND", is_causal=causal)
else:
    import torch.nn.functional as F
    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
t_import = time.perf_counter()
o = fn()
torch.cuda.synchronize()
t1 = time.perf_counter()
o = fn()
torch.cuda.synchronize()
t2 = time.perf_counter()
out = {{"first_s": t1 - t0, "import_s": t_import - t0,
        "second_ms": (t2 - t1) * 1e3, "finite": bool(torch.isfinite(o).all())}}
if what == "sagejit":
    out["stats"] = sagejit.stats()
print("RESULT " + json.dumps(out))
"""


def run_child(what: str, args: argparse.Namespace,
              cache_dir: Optional[str]) -> Dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SAGEJIT_CACHE_PATH"] = ""
    if cache_dir is not None:
        env["SAGEJIT_CACHE_DIR"] = cache_dir
    code = CHILD.format(b=args.batch, h=args.heads, n=args.seq,
                        d=args.head_dim, causal=bool(args.causal), what=what)
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env,
                           capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % args.timeout}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
    return {"error": "rc=%d: %s" % (r.returncode, " | ".join(tail))}


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0].get("error") if runs else "no run"}
    out: Dict[str, Any] = {
        "first_s_median": statistics.median(r["first_s"] for r in ok),
        "first_s_all": [round(r["first_s"], 3) for r in ok],
        "import_s_median": statistics.median(r["import_s"] for r in ok),
        "second_ms_median": statistics.median(r["second_ms"] for r in ok),
        "finite": all(r["finite"] for r in ok), "runs": len(ok),
        "failed_runs": len(runs) - len(ok)}
    if "stats" in ok[-1]:
        st = ok[-1]["stats"]
        out["last_stats"] = {k: st[k] for k in ("compiles", "disk_hits",
                                                "compile_ms", "load_ms")
                             if k in st}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3,
                    help="warm (and baseline) runs; cold runs once per "
                         "fresh cache, repeated too")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            print("first_call: SKIPPED: no CUDA device")
            return 0
    except ImportError:
        print("first_call: SKIPPED: no torch")
        return 0
    results: Dict[str, Any] = {
        "shape": {"B": args.batch, "H": args.heads, "N": args.seq,
                  "D": args.head_dim, "causal": bool(args.causal),
                  "dtype": "fp16"}}
    tmp = tempfile.mkdtemp(prefix="sagejit-first-call-")
    try:
        cold, warm = [], []
        for i in range(args.repeats):
            cache = os.path.join(tmp, "cache%d" % i)  # empty: cold
            cold.append(run_child("sagejit", args, cache))
            warm.append(run_child("sagejit", args, cache))  # filled: warm
        results["sagejit_cold"] = summarize(cold)
        results["sagejit_warm"] = summarize(warm)
        probe = subprocess.run([sys.executable, "-c",
                                "import sageattention"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            results["sageattention"] = summarize(
                [run_child("sageattention", args, None)
                 for _ in range(args.repeats)])
        else:
            results["sageattention"] = {"error": "not importable: " + (
                probe.stderr.strip().splitlines() or ["?"])[-1]}
        results["sdpa"] = summarize([run_child("sdpa", args, None)
                                     for _ in range(args.repeats)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("first call, B=%d H=%d N=%d D=%d causal=%d fp16 (new process "
          "each; wall clock of import + first call + synchronize):"
          % (args.batch, args.heads, args.seq, args.head_dim, args.causal))
    print("%-16s %12s %10s %14s  %s" % ("what", "first (s)", "import (s)",
                                        "2nd call (ms)", "notes"))
    for key in ("sagejit_cold", "sagejit_warm", "sageattention", "sdpa"):
        r = results[key]
        if "error" in r:
            print("%-16s %s" % (key, r["error"]))
            continue
        notes = ""
        if "last_stats" in r:
            st = r["last_stats"]
            notes = "compiles %d, disk hits %d, compile %.0f ms, load %.0f " \
                    "ms" % (st.get("compiles", 0), st.get("disk_hits", 0),
                            st.get("compile_ms", 0), st.get("load_ms", 0))
        print("%-16s %12.3f %10.3f %14.3f  %s (runs: %s)" % (
            key, r["first_s_median"], r["import_s_median"],
            r["second_ms_median"], notes, r["first_s_all"]))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "first_call.json"), "w") as f:
            json.dump(results, f, indent=1)

    def s(key: str) -> str:
        r = results[key]
        return "%s %.2f s" % (key, r["first_s_median"]) if "error" not in r \
            else "%s error" % key
    print("first_call: " + ", ".join(s(k) for k in ("sagejit_cold",
                                                    "sagejit_warm",
                                                    "sageattention", "sdpa")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
