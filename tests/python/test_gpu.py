"""GPU tests: accuracy against an fp32 reference, views, streams, devices,
CUDA graphs, torch.compile, varlen.  Every test skips without CUDA."""

import itertools
import math
import threading
from typing import Tuple

import pytest

from _helpers import library_under_test

torch = pytest.importorskip("torch")

import sagejit  # noqa: E402

F = torch.nn.functional

if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)",
                allow_module_level=True)
if library_under_test() is None:
    pytest.skip("libsagejit not built (set SAGEJIT_LIBRARY)",
                allow_module_level=True)

CC = torch.cuda.get_device_capability()
FAMILIES = ["fp16pv"] + (["fp8pv"] if CC >= (8, 9) else []) + \
    (["wgmma"] if CC == (9, 0) else [])
# Accuracy gates (as `sagejit check`): relative L2 and cosine per family.
GATE = {"fp16pv": (2e-2, 0.9998), "fp8pv": (5e-2, 0.998),
        "wgmma": (5e-2, 0.998)}
# Head dims the wgmma family compiles as themselves (others: fp8pv).
WGMMA_DIMS = (64, 128, 256)
LSE_TOL = 5e-2


# ----------------------------------------------------------------- helpers
def make(shape, dtype=torch.float16, k_bias=0.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
    if k_bias:
        t = t + k_bias * torch.randn(shape[-1], generator=g, device="cuda")
    return t.to(dtype)


def reference(q, k, v, layout="HND", causal=False, sm_scale=None,
              align="top_left") -> Tuple[torch.Tensor, torch.Tensor]:
    """fp32 SDPA (o in q's layout) and the natural-log LSE [B, Hq, Nq]."""
    if layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = q.float(), k.float(), v.float()
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    nq, nk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    mask = None
    if causal:
        off = 0 if align == "top_left" else nk - nq
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        mask = j <= i + off
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        o = o.masked_fill(~mask.any(-1)[:, None], 0.0)  # rows seeing no key
    lse = torch.logsumexp(s, dim=-1)
    if layout == "NHD":
        o = o.transpose(1, 2)
    return o, lse


def metrics(o: torch.Tensor, r: torch.Tensor) -> Tuple[float, float]:
    o, r = o.double().flatten(), r.double().flatten()
    rel = ((o - r).norm() / r.norm()).item()
    cos = (torch.dot(o, r) / (o.norm() * r.norm())).item()
    return rel, cos


def assert_close(o, r, family, what=""):
    assert torch.isfinite(o).all(), "non-finite output " + what
    rel, cos = metrics(o, r)
    max_rel, min_cos = GATE[family]
    assert rel < max_rel and cos > min_cos, \
        "%s %s: rel L2 %.4g (< %g), cosine %.6f (> %g)" % (
            family, what, rel, max_rel, cos, min_cos)


def assert_lse_close(lse, ref, what=""):
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(lse), finite), "LSE finiteness " + what
    err = (lse[finite] - ref[finite]).abs().max().item() if finite.any() \
        else 0.0
    assert err < LSE_TOL, "LSE max abs err %.4g %s" % (err, what)


# ---------------------------------------------------------------- accuracy
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_matches_fp32_sdpa(family, dtype, layout, causal, head_dim) -> None:
    b, h, n = 2, 4, 333  # n not a multiple of any block
    shape = (b, h, n, head_dim) if layout == "HND" else (b, n, h, head_dim)
    q, k, v = make(shape, dtype, seed=1), make(shape, dtype, 2.0, 2), \
        make(shape, dtype, seed=3)
    o = sagejit.sageattn(q, k, v, tensor_layout=layout, is_causal=causal,
                         family=family)
    assert o.shape == q.shape and o.dtype == dtype and o.is_contiguous()
    ref, _ = reference(q, k, v, layout, causal)
    assert_close(o, ref, family, "%s %s causal=%s D=%d" % (
        dtype, layout, causal, head_dim))


@pytest.mark.parametrize("head_dim", [32, 96, 256])
def test_other_head_dims(head_dim) -> None:
    for family in FAMILIES:
        q, k, v = (make((1, 2, 200, head_dim), seed=s) for s in (4, 5, 6))
        if family == "wgmma" and head_dim not in WGMMA_DIMS:
            with pytest.raises(sagejit.UnsupportedError, match="head dims"):
                sagejit.sageattn(q, k, v, family=family)
            continue
        o = sagejit.sageattn(q, k, v, family=family, is_causal=True)
        assert_close(o, reference(q, k, v, causal=True)[0], family,
                     "D=%d" % head_dim)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_gqa_cross_lengths_and_lse(family, align) -> None:
    q = make((2, 8, 150, 128), seed=7)
    k = make((2, 2, 400, 128), k_bias=3.0, seed=8)
    v = make((2, 2, 400, 128), seed=9)
    for nq, nk in ((150, 400), (150, 100)):
        qq, kk, vv = q[:, :, :nq], k[:, :, :nk], v[:, :, :nk]
        o, lse = sagejit.sageattn(qq, kk, vv, is_causal=True,
                                  causal_alignment=align, return_lse=True,
                                  family=family, sm_scale=0.1)
        ref, ref_lse = reference(qq, kk, vv, "HND", True, 0.1, align)
        assert lse.shape == (2, 8, nq) and lse.dtype == torch.float32
        assert_close(o, ref, family, "%s Nq=%d Nk=%d" % (align, nq, nk))
        assert_lse_close(lse, ref_lse, "%s Nq=%d Nk=%d" % (align, nq, nk))


@pytest.mark.parametrize("family", FAMILIES)
def test_options_run(family) -> None:
    q, k, v = (make((1, 4, 256, 128), seed=s) for s in (10, 11, 12))
    ref = reference(q, k, v)[0]
    accums = ["fp32", "fp16+fp32"] if family == "fp16pv" else \
        ["fp32", "fp32+fp32", "fp32+fp16", "fp32+fp32+splitv", "pv16", "pvi8",
         "pvi8+splitv"]
    # (wgmma: fp32+fp32, fp32+fp32+splitv, pv16, pvi8 and pvi8+splitv only)
    ran = 0
    for gran in ("per_block", "per_warp", "per_thread"):
        for accum in accums:
            try:
                o = sagejit.sageattn(q, k, v, family=family,
                                     qk_quant_gran=gran, pv_accum_dtype=accum)
            except sagejit.UnsupportedError:
                continue  # a combination this family does not offer
            assert_close(o, ref, family, "%s %s" % (gran, accum))
            ran += 1
    assert ran >= 2
    o = sagejit.sageattn(q, k, v, family=family, smooth_k=False)
    assert_close(o, ref, family, "smooth_k=False")
    if family == "fp16pv":
        # V is read in place by the FP16 family: smooth_v is an FP8 option
        # (docs/kernels.md), refused with the library's reason.
        with pytest.raises(sagejit.UnsupportedError, match="smooth_v"):
            sagejit.sageattn(q, k, v, family=family, smooth_v=True,
                             pv_accum_dtype="fp32")
    else:
        accum = "fp32+fp32" if family == "wgmma" else "fp32"
        o = sagejit.sageattn(q, k, v, family=family, smooth_v=True,
                             pv_accum_dtype=accum)
        assert_close(o, ref, family, "smooth_v=True")
    if family == "wgmma":
        # accumulating O in the tensor core is not offered (docs/kernels.md)
        with pytest.raises(sagejit.UnsupportedError, match="fp32\\+fp32"):
            sagejit.sageattn(q, k, v, family=family, pv_accum_dtype="fp32")


# ----------------------------------------------------------- views, layout
def test_non_contiguous_views_are_read_in_place() -> None:
    b, n, h, d = 2, 300, 4, 64
    qkv = make((b, n, 3, h, d), seed=13)  # a fused QKV projection output
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.is_contiguous()
    o = sagejit.sageattn(q, k, v, tensor_layout="NHD")
    o_c = sagejit.sageattn(q.contiguous(), k.contiguous(), v.contiguous(),
                           tensor_layout="NHD")
    assert torch.equal(o, o_c)
    # the same data seen as HND through transpose views
    o_h = sagejit.sageattn(q.transpose(1, 2), k.transpose(1, 2),
                           v.transpose(1, 2), tensor_layout="HND")
    assert o_h.shape == (b, h, n, d)
    assert torch.equal(o_h, o.transpose(1, 2))
    # a padded head_dim row (stride 128 for D=64)
    pad = make((b, h, n, 128), seed=14)[..., :64]
    o_p = sagejit.sageattn(pad, pad, pad)
    assert torch.equal(o_p, sagejit.sageattn(*(pad.contiguous(),) * 3))


def test_misaligned_view_gives_the_library_message() -> None:
    base = make((2 * 4 * 64 * 64 + 1,))
    q = base[1:].view(2, 4, 64, 64)  # 2-byte offset: not 16-byte aligned
    k = v = make((2, 4, 64, 64))
    with pytest.raises(sagejit.InvalidArgumentError,
                       match="16-byte aligned") as e:
        sagejit.sageattn(q, k, v)
    assert e.value.status_name == "SJ_ERR_INVALID_ARGUMENT"
    # the same shapes and strides, aligned, run and are remembered; the
    # misaligned view then takes the short path, and the library refuses it
    sagejit.sageattn(k, k, v)
    with pytest.raises(sagejit.InvalidArgumentError, match="16-byte aligned"):
        sagejit.sageattn(q, k, v)


def test_gpu_argument_errors() -> None:
    q = make((1, 2, 64, 80))
    with pytest.raises(sagejit.UnsupportedError, match="head_dim 80"):
        sagejit.sageattn(q, q, q)
    q = make((1, 2, 64, 64))
    with pytest.raises(ValueError, match="same device"):
        sagejit.sageattn(q, q.cpu(), q)
    if CC < (8, 9):
        with pytest.raises(sagejit.UnsupportedError, match="fp8pv"):
            sagejit.sageattn(q, q, q, family="fp8pv")


def test_empty_query() -> None:
    q = make((2, 4, 0, 64))
    k = make((2, 4, 16, 64))
    o, lse = sagejit.sageattn(q, k, k, return_lse=True)
    assert o.shape == q.shape and lse.shape == (2, 4, 0)


def test_no_backward() -> None:
    q = make((1, 2, 64, 64)).requires_grad_()
    o = sagejit.sageattn(q, q.detach(), q.detach())  # forward works
    with pytest.raises(RuntimeError):
        o.float().sum().backward()


# ----------------------------------------------------- streams and devices
def test_current_stream_is_honoured() -> None:
    q, k, v = (make((2, 8, 1024, 128), seed=s) for s in (20, 21, 22))
    ref = sagejit.sageattn(q, k, v)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    q2 = torch.zeros_like(q)
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keeps `side` busy for a while
        q2.copy_(q)  # only correct if sagejit runs after this, on `side`
        o = sagejit.sageattn(q2, k, v)
    side.synchronize()
    assert torch.equal(o, ref)


def test_threads_share_a_context() -> None:
    q, k, v = (make((1, 4, 512, 64), seed=s) for s in (23, 24, 25))
    ref = sagejit.sageattn(q, k, v)
    torch.cuda.synchronize()
    results, errors = [None] * 4, []

    def work(i: int) -> None:
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(5):
                    results[i] = sagejit.sageattn(q, k, v)
            s.synchronize()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for r in results:
        assert torch.equal(r, ref)


# ------------------------------------------------------ repeated calls
def _fast_hits(monkeypatch):
    """Counts the calls that took the short path (attention._dense_fast)."""
    from sagejit import attention as A
    hits = []
    real = A._dense_fast

    def spy(*a):
        out = real(*a)
        if out is not None:
            hits.append(1)
        return out

    monkeypatch.setattr(A, "_dense_fast", spy)
    return hits


def test_repeated_calls_match_first_calls(monkeypatch) -> None:
    """Calls that repeat an earlier call's shapes and arguments on new data
    take the short path, and give bit for bit what the full path gives
    for the same data; calls that differ in any argument do not mix."""
    from sagejit import attention as A
    if not sagejit.uses_custom_op():
        pytest.skip("the short path needs torch >= 2.4")
    hits = _fast_hits(monkeypatch)
    cases = [
        ((2, 4, 300, 64), (2, 2, 257, 64), "HND", dict()),
        ((2, 4, 300, 64), (2, 2, 257, 64), "HND", dict(is_causal=True)),
        ((2, 4, 300, 64), (2, 2, 257, 64), "HND",
         dict(is_causal=True, return_lse=True)),
        ((2, 4, 300, 64), (2, 2, 257, 64), "HND", dict(sm_scale=0.05)),
        ((1, 130, 4, 128), (1, 200, 4, 128), "NHD", dict(return_lse=True)),
        ((1, 130, 4, 128), (1, 200, 4, 128), "NHD",
         dict(family="fp16pv", causal_alignment="bottom_right",
              is_causal=True)),
    ]
    A._clear_plans()
    for rnd in range(2):
        for i, (qs, ks, layout, kw) in enumerate(cases):
            q = make(qs, seed=100 + 10 * i + rnd)
            k = make(ks, seed=200 + 10 * i + rnd, k_bias=2.0)
            v = make(ks, seed=300 + 10 * i + rnd)
            before = len(hits)
            got = sagejit.sageattn(q, k, v, tensor_layout=layout, **kw)
            assert len(hits) == before + rnd, (i, rnd)
            saved = dict(A._plans())  # the full path for the same data
            A._clear_plans()
            want = sagejit.sageattn(q, k, v, tensor_layout=layout, **kw)
            A._plans().update(saved)
            if kw.get("return_lse"):
                assert torch.equal(got[0], want[0]) and \
                    torch.equal(got[1], want[1])
                assert got[1].shape == (qs[0], qs[1] if layout == "HND"
                                        else qs[2],
                                        qs[2] if layout == "HND" else qs[1])
            else:
                assert torch.equal(got, want), (i, rnd)
            o, _ = reference(q, k, v, layout, kw.get("is_causal", False),
                             kw.get("sm_scale"),
                             kw.get("causal_alignment", "top_left"))
            out = got[0] if kw.get("return_lse") else got
            assert metrics(out, o)[1] > 0.998
    assert len(hits) == len(cases)  # every case hit in the second round


def test_repeated_call_still_refuses_bad_arguments() -> None:
    q = make((1, 2, 128, 64))
    sagejit.sageattn(q, q, q, sm_scale=1.0)
    sagejit.sageattn(q, q, q, sm_scale=1.0)
    with pytest.raises(TypeError):
        sagejit.sageattn(q, q, q, sm_scale=True)
    sagejit.sageattn(q, q, q, smooth_k=1)
    sagejit.sageattn(q, q, q, smooth_k=1)
    with pytest.raises(TypeError):
        sagejit.sageattn(q, q, q, smooth_k=1.0)
    with pytest.raises(TypeError):
        sagejit.sageattn(q, q, q, bogus=1)


def test_repeated_call_with_grad_has_no_backward() -> None:
    q = make((1, 2, 64, 64))
    sagejit.sageattn(q, q, q)
    sagejit.sageattn(q, q, q)  # cached
    qg = q.clone().requires_grad_()
    o = sagejit.sageattn(qg, q, q)
    assert o.requires_grad
    with pytest.raises(RuntimeError):
        o.float().sum().backward()


def test_second_device() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("one CUDA device")
    q = make((1, 2, 128, 64)).to("cuda:1")
    with torch.cuda.device(0):  # the current device is not the tensors'
        o = sagejit.sageattn(q, q, q, family="fp16pv")
    assert o.device == q.device
    assert_close(o, reference(q, q, q)[0], "fp16pv", "on cuda:1")
    assert 1 in sagejit.info()["contexts"]


def test_info_and_stats_on_gpu() -> None:
    q = make((1, 2, 128, 64))
    sagejit.sageattn(q, q, q)
    i = sagejit.info()
    assert i["device_count"] >= 1 and i["devices"][0]["target"]
    dev = torch.cuda.current_device()
    ctx = i["contexts"][dev]
    assert ctx["stats"]["launches"] > 0 and ctx["target"]
    assert sagejit.stats()["launches"] >= ctx["stats"]["launches"]


# -------------------------------------------------------------- CUDA graphs
def test_cuda_graph_capture_and_replay() -> None:
    q, k, v = (make((2, 8, 512, 128), seed=s) for s in (30, 31, 32))
    # compiles/loads the kernels; the captured call then repeats it (the
    # short path of repeated calls, under capture)
    sagejit.sageattn(q, k, v, is_causal=True, return_lse=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o, lse = sagejit.sageattn(q, k, v, is_causal=True, return_lse=True)
    for seed in (33, 34):
        q.copy_(make(q.shape, seed=seed))
        g.replay()
        torch.cuda.synchronize()
        ref, ref_lse = sagejit.sageattn(q, k, v, is_causal=True,
                                        return_lse=True)
        assert torch.equal(o, ref) and torch.equal(lse, ref_lse)


# ------------------------------------------------------------ torch.compile
class _Block(torch.nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, c // self.heads)
        q, k, v = qkv.unbind(2)  # NHD views
        o = sagejit.sageattn(q, k, v, tensor_layout="NHD", is_causal=True)
        return self.proj(o.reshape(b, n, c))


def test_torch_compile_fullgraph() -> None:
    if not sagejit.uses_custom_op():
        pytest.skip("needs torch >= 2.4 (torch.library.custom_op)")
    m = _Block().cuda().half().eval()
    x = make((2, 256, 256), seed=40)
    with torch.no_grad():
        eager = m(x)
        compiled = torch.compile(m, fullgraph=True)
        out = compiled(x)
        out2 = compiled(make((2, 256, 256), seed=41))
    assert out.shape == eager.shape
    rel, _ = metrics(out, eager)
    assert rel < 1e-2, rel
    assert torch.isfinite(out2).all()


def test_torch_compile_reduce_overhead() -> None:
    if not sagejit.uses_custom_op():
        pytest.skip("needs torch >= 2.4 (torch.library.custom_op)")
    m = _Block().cuda().half().eval()
    x = make((1, 128, 256), seed=42)
    with torch.no_grad():
        eager = m(x)
        compiled = torch.compile(m, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):  # record, then replay the CUDA graph
            out = compiled(x)
    rel, _ = metrics(out.clone(), eager)
    assert rel < 1e-2, rel


def test_opcheck() -> None:
    """PyTorch's own consistency checks of the custom op (schema, fake
    implementation vs real outputs, dispatch under AOT autograd)."""
    if not sagejit.uses_custom_op() or not hasattr(torch.library, "opcheck"):
        pytest.skip("needs torch >= 2.4")
    q, k, v = (make((1, 4, 128, 64), seed=s) for s in (43, 44, 45))
    torch.library.opcheck(torch.ops.sagejit.attention.default,
                          (q, k, v, 1, True, 0.0, True, 0, 0, 0, -1, -1, 0))


# ------------------------------------------------------------------ varlen
def _needs_varlen() -> None:
    if not sagejit._lib.get().has("sj_attention_varlen"):
        pytest.skip("this libsagejit has no sj_attention_varlen yet")


def _packed(lens_q, lens_k, hq=8, hk=2, d=128, dtype=torch.float16):
    q = make((sum(lens_q), hq, d), dtype, seed=50)
    k = make((sum(lens_k), hk, d), dtype, k_bias=2.0, seed=51)
    v = make((sum(lens_k), hk, d), dtype, seed=52)

    def cu(lens):
        return torch.tensor([0] + list(itertools.accumulate(lens)),
                            dtype=torch.int32, device="cuda")

    return q, k, v, cu(lens_q), cu(lens_k)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_per_sequence_sdpa(family, causal) -> None:
    _needs_varlen()
    lens_q = [37, 128, 1, 300, 64]
    lens_k = [37, 200, 5, 300, 64]
    q, k, v, cq, ck = _packed(lens_q, lens_k)
    o, lse = sagejit.sageattn_varlen(q, k, v, cq, ck, max(lens_q),
                                     max(lens_k), is_causal=causal,
                                     return_lse=True, family=family)
    assert o.shape == q.shape and lse.shape == (8, sum(lens_q))
    refs, ref_lses = [], []
    for i in range(len(lens_q)):
        a, b = int(cq[i]), int(cq[i + 1])
        c, e = int(ck[i]), int(ck[i + 1])
        r, rl = reference(q[a:b].transpose(0, 1)[None],
                          k[c:e].transpose(0, 1)[None],
                          v[c:e].transpose(0, 1)[None], "HND", causal)
        refs.append(r[0].transpose(0, 1))
        ref_lses.append(rl[0])
    assert_close(o, torch.cat(refs), family, "varlen causal=%s" % causal)
    assert_lse_close(lse, torch.cat(ref_lses, dim=1), "varlen")
    # no validation (no synchronization): same result
    o2 = sagejit.sageattn_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k),
                                 is_causal=causal, family=family,
                                 validate_cu_seqlens=False)
    assert torch.equal(o, o2)


def test_varlen_bad_prefix_sums_are_refused() -> None:
    _needs_varlen()
    q, k, v, cq, ck = _packed([10, 20], [10, 20])
    bad = cq.clone()
    bad[-1] = 999  # last != total
    with pytest.raises(sagejit.InvalidArgumentError):
        sagejit.sageattn_varlen(q, k, v, bad, ck, 20, 20)


def test_varlen_cuda_graph() -> None:
    _needs_varlen()
    q, k, v, cq, ck = _packed([100, 28, 300], [100, 28, 300])
    sagejit.sageattn_varlen(q, k, v, cq, ck, 300, 300, is_causal=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = sagejit.sageattn_varlen(q, k, v, cq, ck, 300, 300,
                                    is_causal=True, validate_cu_seqlens=False)
    g.replay()
    torch.cuda.synchronize()
    ref = sagejit.sageattn_varlen(q, k, v, cq, ck, 300, 300, is_causal=True)
    assert torch.equal(o, ref)
    # validating would synchronize: refused while capturing, before any
    # CUDA work (the capture ends empty)
    g2 = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="validate_cu_seqlens=False"):
        with torch.cuda.graph(g2):
            sagejit.sageattn_varlen(q, k, v, cq, ck, 300, 300)

