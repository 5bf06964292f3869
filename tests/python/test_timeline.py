"""bench/timeline: the per-CTA timeline tools of bench/NOTES.md.  On any
machine: summarize()'s arithmetic on a made-up timeline whose clock wraps,
and make_templates.py still matching kernel_templates/ and its instrumented
wgmma kernel compiling (NVRTC, compile-only, no GPU)."""

import importlib.util
import json
import sys

import pytest

from _helpers import ROOT, library_under_test, run_python

TIMELINE = ROOT / "bench" / "timeline"
MASK = 0xFFFFFFFF


def _module(name):
    spec = importlib.util.spec_from_file_location(name, TIMELINE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cta(entry_ns, i, length=10000, prologue=2000, epilogue=1000, sm=0):
    """One CTA's 16 words: entry, first Q.K^T, loop end, pre-store, smid,
    block index, then the seven prologue steps 100 ns apart."""
    e = entry_ns & MASK
    return ([e, (e + prologue) & MASK, (e + length - epilogue) & MASK, (e + length) & MASK,
             sm, i, 0, 0] + [(e + 100 * (k + 1)) & MASK for k in range(7)] + [0])


def test_summarize_wrapping_clock():
    tl = _module("cta_timeline")
    base = MASK - 255  # the clock's low word wraps 256 ns after the first entry
    # two slots, two full waves of 10 us CTAs, then a 5 us CTA alone
    words = [_cta(base, 0, sm=0), _cta(base, 1, sm=1),
             _cta(base + 10000, 2, sm=0), _cta(base + 10000, 3, sm=1),
             _cta(base + 20000, 4, length=5000, sm=0)]
    r = tl.summarize(words, slots=2)
    assert r["ctas"] == 5 and r["sms"] == 2
    assert r["span_us"] == 25.0
    # busy CTA-time 45 us of 2 x 25
    assert r["busy_frac"] == 0.9
    assert r["cta_us"] == [5.0, 10.0, 10.0]
    assert r["prologue_us"][1] == 2.0
    assert r["loop_us"][1] == 7.0
    assert r["epilogue_us"][1] == 1.0
    assert r["first_wave_cta_us"] == [10.0, 10.0, 10.0]
    assert r["rest_cta_us"][0] == 5.0
    assert r["steps_since_entry_us"]["sync"] == 0.1
    assert r["steps_since_entry_us"]["k0_wait"] == 0.7


def test_timeline_templates_compile(tmp_path):
    if library_under_test() is None:
        pytest.skip("libsagejit not built (set SAGEJIT_LIBRARY)")
    import sagejit
    if not sagejit.info()["nvrtc"]["found"]:
        pytest.skip("NVRTC not found")
    out = tmp_path / "tl"
    mk = run_python(
        "import runpy, sys; sys.argv = ['make_templates.py', %r, %r]; "
        "runpy.run_path(%r, run_name='__main__')"
        % (str(ROOT / "kernel_templates"), str(out), str(TIMELINE / "make_templates.py")),
        {})
    assert mk.returncode == 0, mk.stdout + mk.stderr
    assert "tl_now()" in (out / "sj_attn_wgmma.cuh").read_text()
    # the default sm_90a plan at D = 128: solo and two-consumer kernels
    warm = run_python(
        "import json, sagejit; r = sagejit.warm(head_dims=[128], causal=[False], "
        "dtypes=['fp16'], families=['wgmma'], targets=['sm_90a'], jobs=2); "
        "print(json.dumps(r))",
        {"SAGEJIT_TEMPLATE_DIR": str(out), "SAGEJIT_CACHE_DIR": str(tmp_path / "cache"),
         "SAGEJIT_CACHE_PATH": "", "SAGEJIT_LIBRARY": library_under_test(),
         "PYTHONPATH": ":".join(p for p in sys.path if p)}, timeout=600)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    r = json.loads(warm.stdout.strip().splitlines()[-1])
    assert r["failed"] == 0 and r["compiled"] == r["total"] > 0
