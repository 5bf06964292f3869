#!/usr/bin/env python3
"""Where the first sagejit.sageattn call of a process spends its time:
library load, context creation, the direct call, the custom-op call.  Each
phase is timed in a fresh process (so every one is a true first), and the
slowest is profiled with cProfile."""
import subprocess
import sys

CHILD = r"""
import cProfile, io, pstats, sys, time
import torch
q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.float16)
           for _ in range(3))
torch.cuda.synchronize()
phase = sys.argv[1]
t0 = time.perf_counter()
import sagejit
from sagejit import _lib, attention as A
t_import = time.perf_counter()
lib = _lib.get()
t_lib = time.perf_counter()
ctx = _lib.contexts.get(lib, 0)
t_ctx = time.perf_counter()
pr = cProfile.Profile()
pr.enable()
if phase == "direct":
    o = A._attention_impl(q, k, v, 1, False, 128 ** -0.5, False, 0, 0, 0, -1, -1, 0)
else:
    o = sagejit.sageattn(q, k, v)
if isinstance(o, tuple):
    o = o[0]
torch.cuda.synchronize()
pr.disable()
t_call = time.perf_counter()
print("PHASES %s import %.3f lib %.3f ctx %.3f call %.3f total %.3f" % (
    phase, t_import - t0, t_lib - t_import, t_ctx - t_lib, t_call - t_ctx, t_call - t0))
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(18)
print(s.getvalue()[:5000])
"""

for phase in ("direct", "op"):
    r = subprocess.run([sys.executable, "-c", CHILD, phase], capture_output=True,
                       text=True, timeout=120)
    print(r.stdout[-6000:])
    if r.returncode:
        print(r.stderr[-3000:])
