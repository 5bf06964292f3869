"""Argument checking and shapes, on any machine (no GPU needed).

CPU tensors are validated by the library on a compile-only context before
the call is refused for not being on a GPU, so the library's own messages
(an unsupported head dim, bad strides) are checked here too; meta tensors
give empty outputs of the right shapes (through the fake implementation of
the custom op on torch >= 2.4).
"""

import itertools
import math

import pytest

from _helpers import library_under_test

torch = pytest.importorskip("torch")

import sagejit  # noqa: E402
from sagejit import attention as A  # noqa: E402


def _need_library() -> None:
    if library_under_test() is None:
        pytest.skip("libsagejit not built (set SAGEJIT_LIBRARY)")


def qkv(shape=(2, 4, 64, 64), kv_shape=None, dtype=torch.float16,
        device="cpu"):
    kv_shape = kv_shape or shape
    return (torch.randn(shape, dtype=torch.float32).to(dtype).to(device),
            torch.randn(kv_shape, dtype=torch.float32).to(dtype).to(device),
            torch.randn(kv_shape, dtype=torch.float32).to(dtype).to(device))


def meta(shape, dtype=torch.float16):
    return torch.empty(shape, dtype=dtype, device="meta")


# --------------------------------------------------------------- keywords
def test_unknown_keyword_is_a_type_error() -> None:
    q, k, v = qkv()
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        sagejit.sageattn(q, k, v, foo=1)
    with pytest.raises(TypeError, match="qk_quant_gran"):  # lists options
        sagejit.sageattn(q, k, v, tensor_format="HND")
    with pytest.raises(TypeError, match="validate_cu_seqlens"):
        sagejit.sageattn(q, k, v, validate_cu_seqlens=False)


def test_option_values() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="pv_accum_dtype must be one of"):
        sagejit.sageattn(q, k, v, pv_accum_dtype="fp64")
    with pytest.raises(ValueError, match="family must be one of"):
        sagejit.sageattn(q, k, v, family="int4")
    with pytest.raises(ValueError, match="causal_alignment"):
        sagejit.sageattn(q, k, v, causal_alignment="middle")
    with pytest.raises(TypeError, match="smooth_k"):
        sagejit.sageattn(q, k, v, smooth_k="yes")
    with pytest.raises(TypeError, match="qk_quant_gran"):
        sagejit.sageattn(q, k, v, qk_quant_gran=3)


def test_option_parsing() -> None:
    o = A._parse_options("f", {"qk_quant_gran": "per-warp",
                               "pv_accum_dtype": "fp32_fp16",
                               "family": "FP8PV", "smooth_k": False,
                               "smooth_v": True,
                               "causal_alignment": "bottom_right"},
                         A._OPTIONS)
    assert o == A._Options(family=2, qk_quant=2, pv_accum=4, smooth_k=0,
                           smooth_v=1, causal_align=1)
    d = A._parse_options("f", {}, A._OPTIONS)
    assert d == A._Options(0, 0, 0, -1, -1, 0)


def test_bad_layout() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="tensor_layout must be 'HND' or "
                                         "'NHD'"):
        sagejit.sageattn(q, k, v, tensor_layout="BHSD")


# ---------------------------------------------------------------- tensors
def test_cpu_tensors_say_cuda_is_needed() -> None:
    q, k, v = qkv()
    with pytest.raises(sagejit.InvalidArgumentError, match="CUDA") as info:
        sagejit.sageattn(q, k, v)
    assert info.value.status_name == "SJ_ERR_INVALID_ARGUMENT"
    assert "cpu" in str(info.value)


def test_not_a_tensor() -> None:
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        sagejit.sageattn(q, k.numpy(), v)


def test_dtypes() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="same dtype"):
        sagejit.sageattn(q, k.to(torch.bfloat16), v)
    with pytest.raises(ValueError, match="float16 or torch.bfloat16"):
        sagejit.sageattn(q.float(), k.float(), v.float())


def test_shapes() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4-D"):
        sagejit.sageattn(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        sagejit.sageattn(q, k, v[:, :, :32])
    with pytest.raises(ValueError, match="same batch size"):
        sagejit.sageattn(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="same head_dim"):
        sagejit.sageattn(q, k[..., :32], v[..., :32])
    with pytest.raises(ValueError, match=r"heads_q \(4\) must be a multiple "
                                         r"of heads_kv \(3\)"):
        sagejit.sageattn(q, k[:, :3], v[:, :3])


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_sm_scale_must_be_positive(scale) -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="sm_scale must be a positive "
                                         "finite number") as info:
        sagejit.sageattn(q, k, v, sm_scale=scale)
    assert info.value.status_name == "SJ_ERR_INVALID_ARGUMENT"


def test_last_dim_must_be_contiguous() -> None:
    q, k, v = qkv(shape=(2, 4, 64, 64))
    with pytest.raises(ValueError, match="must be contiguous"):
        sagejit.sageattn(q.transpose(2, 3), k, v)


def test_broadcast_views_are_refused() -> None:
    q, k, v = qkv()
    kb = k[:1, :1, :1].expand(k.shape)  # strides (0, 0, 0, 1)
    with pytest.raises(ValueError, match="broadcast"):
        sagejit.sageattn(q, kb, v)
    # one broadcast dimension is fine (read in place)
    kh = k[:, :1].expand(k.shape)
    with pytest.raises(ValueError, match="CUDA"):
        sagejit.sageattn(q, kh, v)


# ------------------------------------------------- the library's own checks
@pytest.mark.parametrize("head_dim", [80, 48, 512])
def test_unsupported_head_dim_gives_the_library_message(head_dim) -> None:
    _need_library()
    q, k, v = qkv(shape=(1, 2, 16, head_dim))
    with pytest.raises(ValueError,
                       match="head_dim %d is not supported" % head_dim) as e:
        sagejit.sageattn(q, k, v)
    assert isinstance(e.value, sagejit.UnsupportedError)
    assert e.value.status_name == "SJ_ERR_UNSUPPORTED"
    assert e.value.function == "sj_attention"
    assert "32, 64, 96, 128 or 256" in e.value.detail


@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
def test_supported_head_dims_reach_the_device_check(head_dim) -> None:
    _need_library()
    q, k, v = qkv(shape=(1, 2, 16, head_dim))
    with pytest.raises(ValueError, match="CUDA tensors only"):
        sagejit.sageattn(q, k, v)


def test_library_checks_strides() -> None:
    _need_library()
    base = torch.randn(2, 4, 16, 68, dtype=torch.float16)
    q = base[..., :64]  # row stride 68: not a multiple of 8 elements
    k = v = torch.randn(2, 4, 16, 64, dtype=torch.float16)
    with pytest.raises(sagejit.InvalidArgumentError,
                       match="multiples of 8 elements"):
        sagejit.sageattn(q, k, v)


def test_meta_tensors_in_nhd_are_validated_too() -> None:
    _need_library()
    with pytest.raises(sagejit.UnsupportedError, match="head_dim 80"):
        sagejit.sageattn(meta((1, 16, 2, 80)), meta((1, 16, 2, 80)),
                         meta((1, 16, 2, 80)), tensor_layout="NHD")


# ----------------------------------------------------------------- shapes
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_meta_output_shapes(layout, dtype) -> None:
    b, hq, hk, nq, nk, d = 2, 8, 2, 100, 300, 128
    if layout == "HND":
        qs, ks = (b, hq, nq, d), (b, hk, nk, d)
    else:
        qs, ks = (b, nq, hq, d), (b, nk, hk, d)
    o = sagejit.sageattn(meta(qs, dtype), meta(ks, dtype), meta(ks, dtype),
                         tensor_layout=layout)
    assert o.shape == qs and o.dtype == dtype and o.device.type == "meta"
    o, lse = sagejit.sageattn(meta(qs, dtype), meta(ks, dtype),
                              meta(ks, dtype), tensor_layout=layout,
                              is_causal=True, return_lse=True,
                              sm_scale=1.0 / math.sqrt(d))
    assert o.shape == qs and o.is_contiguous()
    assert lse.shape == (b, hq, nq) and lse.dtype == torch.float32


def test_meta_output_of_a_view_is_contiguous() -> None:
    base = meta((2, 64, 3, 4, 64))  # [B, N, 3, H, D]
    q, k, v = base[:, :, 0], base[:, :, 1], base[:, :, 2]
    o = sagejit.sageattn(q, k, v, tensor_layout="NHD")
    assert o.shape == (2, 64, 4, 64) and o.is_contiguous()


# ----------------------------------------------------------------- varlen
def _varlen_args(device="meta", lens=(5, 17, 3), hq=8, hk=2, d=64):
    total = sum(lens)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)),
                      dtype=torch.int32)
    q = torch.empty((total, hq, d), dtype=torch.float16, device=device)
    k = torch.empty((total, hk, d), dtype=torch.float16, device=device)
    return q, k, k.clone() if device != "meta" else k, cu, cu, max(lens)


def test_varlen_meta_shapes() -> None:
    q, k, v, cq, ck, m = _varlen_args()
    o, lse = sagejit.sageattn_varlen(q, k, v, cq, ck, m, m, is_causal=True,
                                     return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == (q.shape[1], q.shape[0])
    assert lse.dtype == torch.float32


def test_varlen_arguments() -> None:
    q, k, v, cq, ck, m = _varlen_args()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        sagejit.sageattn_varlen(q, k, v, cq, ck, m, m, tensor_layout="NHD")
    with pytest.raises(ValueError, match="int32"):
        sagejit.sageattn_varlen(q, k, v, cq.long(), ck, m, m)
    with pytest.raises(ValueError, match="same length"):
        sagejit.sageattn_varlen(q, k, v, cq, ck[:-1], m, m)
    with pytest.raises(TypeError, match="max_seqlen_q must be a Python int"):
        sagejit.sageattn_varlen(q, k, v, cq, ck, torch.tensor(m), m)
    with pytest.raises(ValueError, match="3-D"):
        sagejit.sageattn_varlen(q[None], k, v, cq, ck, m, m)
    with pytest.raises(TypeError, match="validate_cu_seqlens"):
        sagejit.sageattn_varlen(q, k, v, cq, ck, m, m,
                                validate_cu_seqlens="no")
    with pytest.raises(ValueError, match="sm_scale"):
        sagejit.sageattn_varlen(q, k, v, cq, ck, m, m, sm_scale=0)


def test_varlen_cpu_says_cuda_is_needed() -> None:
    q, k, v, cq, ck, m = _varlen_args(device="cpu")
    with pytest.raises(ValueError, match="CUDA"):
        sagejit.sageattn_varlen(q, k, v, cq, ck, m, m)


def test_varlen_library_validates_host_prefix_sums() -> None:
    _need_library()
    lib = sagejit._lib.get()
    if not lib.has("sj_attention_varlen_workspace_size"):
        pytest.skip("this libsagejit has no sj_attention_varlen yet")
    q, k, v, cq, ck, m = _varlen_args(device="cpu")
    bad = cq.clone()
    bad[1], bad[2] = bad[2], bad[1]  # not monotone
    with pytest.raises(sagejit.InvalidArgumentError):
        sagejit.sageattn_varlen(q, k, v, bad, ck, m, m)
    with pytest.raises(sagejit.UnsupportedError, match="head_dim 80"):
        q80 = torch.empty((q.shape[0], 8, 80), dtype=torch.float16)
        k80 = torch.empty((k.shape[0], 2, 80), dtype=torch.float16)
        sagejit.sageattn_varlen(q80, k80, k80, cq, ck, m, m)


# ------------------------------------------------ custom op (torch >= 2.4)
def test_custom_op_is_used_when_available() -> None:
    has_api = hasattr(torch.library, "custom_op") and hasattr(
        torch.library, "register_fake")
    assert sagejit.uses_custom_op() == has_api


def test_fake_implementation_shapes() -> None:
    if not sagejit.uses_custom_op():
        pytest.skip("torch %s has no torch.library.custom_op (needs 2.4)"
                    % torch.__version__)
    from torch._subclasses.fake_tensor import FakeTensorMode

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with FakeTensorMode():
        q = torch.empty((2, 100, 8, 64), dtype=torch.bfloat16, device=dev)
        k = torch.empty((2, 300, 2, 64), dtype=torch.bfloat16, device=dev)
        o, lse = torch.ops.sagejit.attention(q, k, k, 2, True, 0.0, True,
                                             0, 0, 0, -1, -1, 0)
        assert o.shape == q.shape and o.dtype == q.dtype
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32
        o, lse = torch.ops.sagejit.attention(q, k, k, 2, False, 0.0, False,
                                             0, 0, 0, -1, -1, 0)
        assert lse.numel() == 0
        qv = torch.empty((25, 8, 64), dtype=torch.float16, device=dev)
        kv = torch.empty((40, 2, 64), dtype=torch.float16, device=dev)
        cu = torch.empty((4,), dtype=torch.int32, device=dev)
        o, lse = torch.ops.sagejit.attention_varlen(
            qv, kv, kv, cu, cu, 10, 20, False, 0.0, True, 0, 0, 0, -1, -1, 0,
            True)
        assert o.shape == qv.shape and lse.shape == (8, 25)


def test_opcheck_on_meta() -> None:
    if not sagejit.uses_custom_op():
        pytest.skip("needs torch >= 2.4")
    q = meta((1, 2, 64, 64))
    o, lse = torch.ops.sagejit.attention(q, q, q, 1, False, 0.0, True, 0, 0,
                                         0, -1, -1, 0)
    assert o.shape == q.shape and lse.shape == (1, 2, 64)


# ------------------------------------------------- repeated calls' keys
def test_call_key_tells_apart_what_the_checks_depend_on() -> None:
    """A repeated call skips the checks only on an equal key: every
    property the checks or the C parameters read must change it,
    including the values' types (True == 1 == 1.0 in Python)."""
    q = torch.zeros((1, 2, 64, 64), dtype=torch.float16)
    k = torch.zeros((1, 2, 64, 64), dtype=torch.float16)

    def key(qq=q, kk=k, vv=k, layout="HND", causal=False, scale=None,
            lse=False, **opts):
        return A._call_key(qq, kk, vv, layout, causal, scale, lse, opts)

    base = key()
    assert base is not None and base == key(q.clone(), k.clone(), k.clone())
    variants = [
        key(qq=q.transpose(1, 2).contiguous().transpose(1, 2)),  # strides
        key(qq=torch.zeros((1, 2, 65, 64), dtype=torch.float16)),
        key(qq=q.to(torch.bfloat16)),
        key(vv=torch.zeros((1, 2, 64, 64), dtype=torch.float32)),
        key(kk=torch.zeros((1, 1, 64, 64), dtype=torch.float16)),
        key(layout="NHD"), key(causal=True), key(causal=1),
        key(scale=1.0), key(scale=1), key(lse=True),
        key(lse=0), key(family="fp16pv"), key(smooth_k=True),
        key(smooth_k=1),
    ]
    keys = [base] + variants
    assert None not in keys and len(set(keys)) == len(keys)
    assert key(family="fp16pv", smooth_k=False) != key(family="fp16pv")
    # arguments of other kinds (mutable, unhashable, or refused by the
    # checks) make no key: the full path decides every time
    assert key(causal=torch.tensor(True)) is None
    assert key(lse=torch.tensor(False)) is None
    assert key(scale=torch.tensor(0.1)) is None
    assert key(smooth_k=1.0) is None
    assert key(scale=True) is None
    assert key(family=["fp16pv"]) is None
    assert key(layout=["HND"]) is None


def test_cpu_and_meta_calls_have_no_key() -> None:
    q = torch.zeros((1, 2, 64, 64), dtype=torch.float16)
    assert A._dense_key(q, q, q, "HND", False, None, False, {}) is None
    m = meta((1, 2, 64, 64))
    assert A._dense_key(m, m, m, "HND", False, None, False, {}) is None
    assert A._dense_key(q.numpy(), q, q, "HND", False, None, False,
                        {}) is None


# ------------------------------------------------------------------- info
def test_info_without_a_gpu() -> None:
    _need_library()
    i = sagejit.info()
    assert i["package"] == sagejit.__version__
    assert i["library"]["version"] == sagejit.__version__
    assert isinstance(i["devices"], list)
    assert "found" in i["nvrtc"] and "found" in i["driver"]
    assert i["torch"]["version"] == torch.__version__
    if not torch.cuda.is_available():
        assert i["contexts"] == {}


def test_warm_compile_only(tmp_path) -> None:
    _need_library()
    if not sagejit.info()["nvrtc"]["found"]:
        pytest.skip("NVRTC not found")
    import os
    old = os.environ.get("SAGEJIT_CACHE_DIR")
    os.environ["SAGEJIT_CACHE_DIR"] = str(tmp_path)
    seen = []
    try:
        r = sagejit.warm(head_dims=[64], causal=[False], dtypes=["fp16"],
                         families=["fp16pv"], qk_quant_grans=["per_warp"],
                         targets=["sm_80"], jobs=2,
                         progress=lambda *a: seen.append(a))
        again = sagejit.warm(head_dims=[64], causal=[False], dtypes=["fp16"],
                             families=["fp16pv"],
                             qk_quant_grans=["per_warp"], targets=["sm_80"])
    finally:
        if old is None:
            del os.environ["SAGEJIT_CACHE_DIR"]
        else:
            os.environ["SAGEJIT_CACHE_DIR"] = old
    assert r["failed"] == 0 and r["compiled"] > 0
    assert len(seen) == r["total"]
    assert again["compiled"] == 0 and again["cached"] == r["compiled"]
    assert (tmp_path / "kernels.db").exists()
    with pytest.raises(ValueError, match="unknown value"):
        sagejit.warm(dtypes=["fp64"], targets=["sm_80"])
