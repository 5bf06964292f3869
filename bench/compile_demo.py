#!/usr/bin/env python3
"""torch.compile, torch.export and CUDA graphs around sagejit.sageattn.

    python3 bench/compile_demo.py

A small transformer (2 blocks, width 1024, 16 heads, D=64, fused QKV
projection whose output is read in place as NHD views, causal) calling
``sagejit.sageattn``.  Each step is tried on its own and reported:

1. dynamo explain: how many graphs and graph breaks TorchDynamo sees;
2. ``torch.compile(fullgraph=True)``: compiles (fullgraph would raise on any
   graph break) and matches eager;
3. ``dynamic=True``: one compiled graph serves two sequence lengths;
4. ``mode="reduce-overhead"``: the compiled model replayed as a CUDA graph;
5. ``torch.export``: the exported graph holds ``sagejit.attention`` as one op
   and runs;
6. timing: eager vs compiled forward.

The last line is a one-line summary; the exit code is 1 if a step failed.
"""

import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import sagejit  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(self.norm(x)).view(b, n, 3, self.heads,
                                          c // self.heads)
        q, k, v = qkv.unbind(2)  # [b, n, heads, d] views, no copy
        o = sagejit.sageattn(q, k, v, tensor_layout="NHD", is_causal=True)
        x = x + self.proj(o.reshape(b, n, c))
        return x + self.mlp(x)


class Model(torch.nn.Module):
    def __init__(self, dim: int = 1024, heads: int = 16,
                 depth: int = 2) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(dim, heads)
                                          for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return x


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def median_ms(fn: Callable[[], Any], reps: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main() -> int:
    if not torch.cuda.is_available():
        print("compile_demo: SKIPPED: no CUDA device")
        return 0
    print("torch %s, sagejit %s, custom op: %s" % (
        torch.__version__, sagejit.__version__, sagejit.uses_custom_op()))
    torch.manual_seed(0)
    m = Model().cuda().half().eval()
    x = torch.randn(4, 1024, 1024, device="cuda", dtype=torch.float16)
    results: Dict[str, str] = {}
    failed: List[str] = []

    def step(name: str, fn: Callable[[], str]) -> None:
        t0 = time.time()
        try:
            results[name] = fn()
            print("[ok]   %-16s %s (%.1f s)" % (name, results[name],
                                                 time.time() - t0),
                  flush=True)
        except Exception as e:
            traceback.print_exc()
            results[name] = "FAILED: %s: %s" % (type(e).__name__,
                                                str(e).splitlines()[0]
                                                if str(e) else "")
            failed.append(name)
            print("[FAIL] %-16s %s" % (name, results[name]), flush=True)

    with torch.no_grad():
        eager = m(x)

        def explain() -> str:
            ex = torch._dynamo.explain(m)(x)
            torch._dynamo.reset()
            reasons = [str(b.reason) for b in getattr(ex, "break_reasons",
                                                      [])]
            if ex.graph_break_count:
                raise RuntimeError("%d graph breaks: %s" % (
                    ex.graph_break_count, "; ".join(reasons[:3])))
            return "%d graph, %d graph breaks, %d ops" % (
                ex.graph_count, ex.graph_break_count, ex.op_count)

        def fullgraph() -> str:
            c = torch.compile(m, fullgraph=True)
            out = c(x)
            r = rel(out, eager)
            if not r < 1e-2:
                raise AssertionError("compiled != eager: rel L2 %.3e" % r)
            return "fullgraph compile succeeded; rel L2 vs eager %.2e" % r

        def dynamic() -> str:
            c = torch.compile(m, fullgraph=True, dynamic=True)
            outs = []
            for n in (512, 768):
                xi = x[:, :n].contiguous()
                outs.append(rel(c(xi), m(xi)))
            if max(outs) > 1e-2:
                raise AssertionError("rel L2 %s" % outs)
            return "N=512 and N=768 through one dynamic graph; rel L2 %s" \
                % ", ".join("%.2e" % o for o in outs)

        def reduce_overhead() -> str:
            c = torch.compile(m, mode="reduce-overhead", fullgraph=True)
            for _ in range(3):  # warm-up, record, replay
                out = c(x)
            r = rel(out.clone(), eager)
            if not r < 1e-2:
                raise AssertionError("rel L2 %.3e" % r)
            ms = median_ms(lambda: c(x))
            return "CUDA-graph replay matches eager (rel L2 %.2e), " \
                   "%.2f ms/forward" % (r, ms)

        def export() -> str:
            ep = torch.export.export(m, (x,))
            code = str(ep.graph)
            n_ops = code.count("sagejit.attention")
            if n_ops != 2:
                raise AssertionError("expected 2 sagejit.attention nodes, "
                                     "found %d" % n_ops)
            r = rel(ep.module()(x), eager)
            if not r < 1e-2:
                raise AssertionError("rel L2 %.3e" % r)
            return "exported graph has %d sagejit.attention nodes; runs, " \
                   "rel L2 %.2e" % (n_ops, r)

        def timing() -> str:
            c = torch.compile(m, fullgraph=True)
            return "eager %.2f ms, compiled %.2f ms per forward (B=4, " \
                   "N=1024)" % (median_ms(lambda: m(x)),
                                median_ms(lambda: c(x)))

        if not sagejit.uses_custom_op():
            print("torch %s has no torch.library.custom_op: sageattn is "
                  "called directly and compiles with a graph break"
                  % torch.__version__)
        step("explain", explain)
        step("fullgraph", fullgraph)
        step("dynamic", dynamic)
        step("reduce-overhead", reduce_overhead)
        step("export", export)
        step("timing", timing)
    print("compile_demo: %s" % ("; ".join(
        "%s %s" % (k, "ok" if not v.startswith("FAILED") else "FAILED")
        for k, v in results.items())))
    if "fullgraph" in results and not results["fullgraph"].startswith(
            "FAILED"):
        print("compile_demo: torch.compile(fullgraph=True) succeeded and "
              "the outputs match eager")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
