"""bench/timeline: the per-CTA timeline tools of bench/NOTES.md.  On any
machine: summarize()'s arithmetic on made-up timelines (a clock that wraps,
co-resident CTAs' loops, a CSV read back), and make_templates.py still
matching kernel_templates/ and its instrumented wgmma kernel compiling
(NVRTC, compile-only, no GPU)."""

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
    # loops 4 x 7 + 2 us, prologues and epilogues 5 x 3 us, of 2 x 25
    assert r["slot_frac"] == {"loop": 0.6, "prologue_epilogue": 0.3, "idle": 0.1}
    # one CTA per multiprocessor at a time: no neighbours
    assert [g[0] for g in r["loop_by_neighbours"]] == [0.0] * 5


def test_loop_by_neighbours():
    """Three CTAs on one multiprocessor: A's loop 2-9 us, B's 7-14 (entry
    5), C's 11-13 (entry 10, 4 us long).  A shares 2 of its 7 us with B's
    loop, B 2 with A and 2 with C, C its whole 2 with B."""
    tl = _module("cta_timeline")
    words = [_cta(0, 0), _cta(5000, 1), _cta(10000, 2, length=4000, prologue=1000)]
    r = tl.summarize(words, slots=3)
    assert r["loop_by_neighbours"] == [[0.29, 7.0], [0.57, 7.0], [1.0, 2.0]]
    # loops 16 us, prologues and epilogues 3 + 3 + 2 us, of 3 slots x 15 us
    assert r["slot_frac"] == {"loop": round(16 / 45, 3), "prologue_epilogue": round(8 / 45, 3),
                              "idle": round(1 - 24 / 45, 3)}


def test_summary_from_csv(tmp_path):
    """--from-csv re-reads what --csv wrote (the first 15 words per CTA)."""
    tl = _module("cta_timeline")
    words = [_cta(MASK - 99 + 3000 * i, i, sm=i % 2) for i in range(6)]
    csv = tmp_path / "t.csv"
    csv.write_text("header\n" + "".join(",".join(str(x) for x in w[:15]) + "\n" for w in words))
    out = run_python(
        "import runpy, sys; sys.argv = ['cta_timeline.py', '--from-csv', %r, '--slots', '2']; "
        "runpy.run_path(%r, run_name='__main__')" % (str(csv), str(TIMELINE / "cta_timeline.py")),
        {})
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == tl.summarize(words, 2)
    # without --slots: three per multiprocessor seen (two here), as the
    # live path's three per multiprocessor of the device
    out = run_python(
        "import runpy, sys; sys.argv = ['cta_timeline.py', '--from-csv', %r]; "
        "runpy.run_path(%r, run_name='__main__')" % (str(csv), str(TIMELINE / "cta_timeline.py")),
        {})
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == tl.summarize(words, 6)


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
