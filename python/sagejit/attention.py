"""``sageattn`` and ``sageattn_varlen``: SageAttention-compatible entry
points over ``sj_attention`` and ``sj_attention_varlen``.

How a call runs:

1. The Python layer checks what the C API cannot see (keyword names, the
   layout string, tensor types, dtypes, devices, shapes, ``sm_scale``) and
   raises ``TypeError`` or :class:`~sagejit.InvalidArgumentError`.
2. With torch >= 2.4 the call goes through the custom operators
   ``torch.ops.sagejit.attention`` / ``attention_varlen`` (with fake
   implementations), so ``torch.compile(fullgraph=True)``, ``torch.export``
   and CUDA graphs see one opaque op; older torch calls the implementation
   directly.
3. The implementation allocates the output, the optional LSE and the
   workspace with ``torch.empty`` on the tensors' device (so CUDA graph
   capture and the caching allocator work), fills the C parameters with the
   tensors' pointers and strides (no copies), and launches on the current
   CUDA stream of that device, through that device's library context.

A repeated eager call (the same shapes, strides, dtype, device and
arguments, as every layer of a model makes) takes a shorter path: its
checks passed and its C parameters were filled before, so it only
allocates the outputs and the workspace, sets the pointers and launches
(:func:`_dense_fast`).

Calls whose tensors are not on a CUDA device are validated by the library
on a compile-only context (so an unsupported head dimension gives the
library's message on any machine) and then rejected; ``meta`` tensors return
empty outputs of the right shapes.
"""

import inspect
import math
import operator
import threading
from collections import OrderedDict
from ctypes import byref, c_size_t
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S
from ._errors import invalid_argument

try:  # torch is needed to call attention, not to import the package
    import torch
except ImportError:  # pragma: no cover - exercised without torch only
    torch = None  # type: ignore[assignment]

__all__ = ["sageattn", "sageattn_varlen", "uses_custom_op"]

# ------------------------------------------------------------------ options
_LAYOUTS = {"HND": S.SJ_LAYOUT_HND, "NHD": S.SJ_LAYOUT_NHD}
_QUANT = {
    "per_block": S.SJ_QUANT_PER_BLOCK,
    "per_warp": S.SJ_QUANT_PER_WARP,
    "per_thread": S.SJ_QUANT_PER_THREAD,
}
_ACCUM = {
    "fp32": S.SJ_ACCUM_FP32,
    "fp32+fp32": S.SJ_ACCUM_FP32_FP32,
    "fp16+fp32": S.SJ_ACCUM_FP16_FP32,
    "fp32+fp16": S.SJ_ACCUM_FP32_FP16,
    "fp32+fp32+splitv": S.SJ_ACCUM_FP32_FP32_SPLITV,
    "pv16": S.SJ_ACCUM_PV16,
    "pvi8": S.SJ_ACCUM_PVI8,
    "pvi8+splitv": S.SJ_ACCUM_PVI8_SPLITV,
}
_FAMILY = {
    "auto": S.SJ_FAMILY_AUTO,
    "fp16pv": S.SJ_FAMILY_FP16PV,
    "fp8pv": S.SJ_FAMILY_FP8PV,
    "wgmma": S.SJ_FAMILY_WGMMA,
}
_ALIGN = {
    "top_left": S.SJ_CAUSAL_TOP_LEFT,
    "bottom_right": S.SJ_CAUSAL_BOTTOM_RIGHT,
}
_OPTIONS = ("qk_quant_gran", "pv_accum_dtype", "smooth_k", "smooth_v",
            "causal_alignment", "family")
_VARLEN_OPTIONS = _OPTIONS + ("validate_cu_seqlens",)

# Fake device addresses for validating calls that have no device memory:
# far apart, so the library's overlap check never fires.
_FAKE_PTR = 1 << 40


class _Options(NamedTuple):
    family: int
    qk_quant: int
    pv_accum: int
    smooth_k: int
    smooth_v: int
    causal_align: int


def _choice(fn: str, name: str, value: Any, table: Dict[str, int],
            default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, str):
        raise TypeError("%s(): %s must be a string, one of %s (got %r)"
                        % (fn, name, ", ".join(table), value))
    key = value.strip().lower().replace("-", "_")
    if key not in table:
        key = key.replace("_", "+") if "fp" in key else key
    if key not in table:
        raise invalid_argument(
            "%s must be one of %s (got %r)" % (name, ", ".join(table), value),
            fn + "()")
    return table[key]


def _tristate(fn: str, name: str, value: Any) -> int:
    if value is None:
        return -1
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise TypeError("%s(): %s must be a bool or None (got %r)"
                        % (fn, name, value))
    return 1 if value else 0


def _parse_options(fn: str, options: Dict[str, Any],
                   allowed: Sequence[str]) -> _Options:
    """Keyword options -> library enums; unknown names raise TypeError."""
    for name in options:
        if name not in allowed:
            raise TypeError(
                "%s() got an unexpected keyword argument %r (sagejit options: "
                "%s)" % (fn, name, ", ".join(allowed)))
    return _Options(
        family=_choice(fn, "family", options.get("family"), _FAMILY,
                       S.SJ_FAMILY_AUTO),
        qk_quant=_choice(fn, "qk_quant_gran", options.get("qk_quant_gran"),
                         _QUANT, S.SJ_QUANT_DEFAULT),
        pv_accum=_choice(fn, "pv_accum_dtype", options.get("pv_accum_dtype"),
                         _ACCUM, S.SJ_ACCUM_DEFAULT),
        smooth_k=_tristate(fn, "smooth_k", options.get("smooth_k")),
        smooth_v=_tristate(fn, "smooth_v", options.get("smooth_v")),
        causal_align=_choice(fn, "causal_alignment",
                             options.get("causal_alignment"), _ALIGN,
                             S.SJ_CAUSAL_TOP_LEFT),
    )


def _scale(fn: str, sm_scale: Optional[float]) -> float:
    """``sm_scale`` -> the C value (0.0 means 1/sqrt(head_dim))."""
    if sm_scale is None:
        return 0.0
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError("%s(): sm_scale must be a float or None (got %r)"
                        % (fn, sm_scale))
    scale = float(sm_scale)
    if not (math.isfinite(scale) and scale > 0.0):
        raise invalid_argument(
            "sm_scale must be a positive finite number (got %r); None "
            "means 1/sqrt(head_dim)" % (sm_scale,), fn + "()")
    return scale


# ------------------------------------------------------------ tensor checks
def _need_torch(fn: str) -> None:
    if torch is None:
        raise ImportError("sagejit.%s() needs PyTorch (import torch failed)"
                          % fn)


def _dtype_code(dtype: Any) -> int:
    return S.SJ_DTYPE_FP16 if dtype == torch.float16 else S.SJ_DTYPE_BF16


def _check_tensors(fn: str, named: Sequence[Tuple[str, Any]],
                   ndim: int, layout: Optional[str]) -> None:
    """Types, ranks, dtypes, devices and contiguous last dims.  (Strings
    are only formatted on the error paths: TorchDynamo traces the rest.)"""
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s(): %s must be a torch.Tensor (got %s)"
                            % (fn, name, type(t).__name__))
    for name, t in named:
        if t.dim() != ndim:
            if layout is None:
                text = "[total, heads, head_dim]"
            elif layout == "HND":
                text = "[batch, heads, seq, head_dim] (tensor_layout='HND')"
            else:
                text = "[batch, seq, heads, head_dim] (tensor_layout='NHD')"
            raise invalid_argument(
                "%s must be %d-D %s (got shape %s)"
                % (name, ndim, text, tuple(t.shape)), fn + "()")
    q = named[0][1]
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise invalid_argument(
            "q has dtype %s; sagejit needs torch.float16 or torch.bfloat16"
            % q.dtype, fn + "()")
    for name, t in named[1:]:
        if t.dtype != q.dtype:
            raise invalid_argument(
                "q, k and v must have the same dtype (q is %s, %s is %s)"
                % (q.dtype, name, t.dtype), fn + "()")
    for name, t in named[1:]:
        if t.device != q.device:
            raise invalid_argument(
                "q, k and v must be on the same device (q is on %s, %s is on "
                "%s)" % (q.device, name, t.device), fn + "()")
    for name, t in named:
        if t.size(-1) > 1 and t.stride(-1) != 1:
            raise invalid_argument(
                "the last dimension (head_dim) of %s must be contiguous "
                "(stride 1); its strides are %s.  sagejit makes no hidden "
                "copies: pass %s.contiguous()"
                % (name, tuple(t.stride()), name), fn + "()")


def _device_error(fn: str, device: Any) -> Exception:
    if torch.cuda.is_available():
        hint = "move them to the GPU first (e.g. q.cuda())"
    else:
        hint = ("torch.cuda.is_available() is False here: sagejit needs an "
                "NVIDIA GPU and a CUDA build of PyTorch")
    return invalid_argument(
        "sagejit runs on CUDA tensors only, but q, k and v are on %s; %s"
        % (device, hint), fn + "()")


def _dense_dims(t: Any, layout: int) -> Tuple[int, int, int, int]:
    """(batch, heads, seq, dim) of a 4-D tensor in ``layout``."""
    if layout == S.SJ_LAYOUT_HND:
        b, h, n, d = t.shape
    else:
        b, n, h, d = t.shape
    return b, h, n, d


def _dense_stride_tuple(name: str, t: Any, layout: int,
                        fn: str) -> Tuple[int, int, int]:
    """C strides (batch, head, seq) of ``t``; broadcast views rejected.
    Pure Python (no ctypes), so TorchDynamo traces it without a break."""
    st = t.stride()
    if layout == S.SJ_LAYOUT_HND:
        sb, sh, sn = st[0], st[1], st[2]
    else:
        sb, sh, sn = st[0], st[2], st[1]
    if sb == 0 and sh == 0 and sn == 0 and t.numel() > t.size(-1):
        # All three zero means "contiguous" to the C API.
        raise invalid_argument(
            "%s is a broadcast view (stride 0 in batch, heads and seq); pass "
            "%s.contiguous()" % (name, name), fn + "()")
    return sb, sh, sn


def _dense_strides(name: str, t: Any, layout: int, fn: str) -> S.SjStrides:
    return S.SjStrides(*_dense_stride_tuple(name, t, layout, fn))


def _contiguous_strides(shape: Sequence[int], layout: int) -> S.SjStrides:
    a, b, c, d = shape
    st = (b * c * d, c * d, d)
    if layout == S.SJ_LAYOUT_HND:
        return S.SjStrides(st[0], st[1], st[2])
    return S.SjStrides(st[0], st[2], st[1])


def _fill_dense(p: S.SjAttentionParams, q: Any, k: Any, v: Any,
                layout: int, causal: bool, sm_scale: float,
                opts: Sequence[int], fn: str) -> None:
    """Everything of ``p`` but the pointers of o, lse and the workspace."""
    b, hq, nq, d = _dense_dims(q, layout)
    _, hk, nk, _ = _dense_dims(k, layout)
    p.dtype = _dtype_code(q.dtype)
    p.layout = layout
    p.batch, p.heads_q, p.heads_kv = b, hq, hk
    p.seq_q, p.seq_kv, p.head_dim = nq, nk, d
    p.q_stride = _dense_strides("q", q, layout, fn)
    p.k_stride = _dense_strides("k", k, layout, fn)
    p.v_stride = _dense_strides("v", v, layout, fn)
    p.o_stride = _contiguous_strides(q.shape, layout)
    p.causal = 1 if causal else 0
    p.sm_scale = sm_scale
    (p.family, p.qk_quant, p.pv_accum, p.smooth_k, p.smooth_v,
     p.causal_align) = opts


def _validate_dense(q: Any, k: Any, v: Any, layout: int, causal: bool,
                    sm_scale: float, return_lse: bool,
                    opts: Sequence[int], fn: str) -> None:
    """Lets the library check a call that cannot run here (no device
    memory), on a compile-only context with fake addresses.  Does nothing if
    the library cannot be loaded: the caller raises its own error next."""
    try:
        lib = _lib.get()
    except Exception:
        return
    ctx = _lib.contexts.validator(lib)
    if ctx is None:
        return
    p = S.SjAttentionParams()
    lib.fn("sj_attention_params_init")(byref(p))
    _fill_dense(p, q, k, v, layout, causal, sm_scale, opts, fn)
    p.q, p.k, p.v, p.o = (_FAKE_PTR, 2 * _FAKE_PTR, 3 * _FAKE_PTR,
                          4 * _FAKE_PTR)
    p.lse = 5 * _FAKE_PTR if return_lse else None
    size = c_size_t()
    st = lib.fn("sj_attention_workspace_size")(ctx, byref(p), byref(size))
    lib.check(st, "sj_attention", ctx)


# The current stream's handle without a torch.cuda.Stream object (what
# TorchInductor's generated code calls); the public call where it is absent.
_raw_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream",
                      None)


def _current_stream(device: Any) -> int:
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


# -------------------------------------------------------- dense: the kernel
def _attention_impl(q: Any, k: Any, v: Any, layout: int, causal: bool,
                    sm_scale: float, return_lse: bool, family: int,
                    qk_quant: int, pv_accum: int, smooth_k: int,
                    smooth_v: int, causal_align: int) -> Tuple[Any, Any]:
    """Runs ``sj_attention``; returns (o, lse).  lse is an empty fp32 tensor
    unless return_lse.  Arguments were checked by :func:`sageattn`."""
    b, hq, nq, _ = _dense_dims(q, layout)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, nq) if return_lse else (0,),
                      dtype=torch.float32, device=q.device)
    if q.device.type != "cuda" or o.numel() == 0:
        return o, lse  # meta tensors (shapes only), or nothing to compute
    lib = _lib.get()
    ctx = _lib.contexts.get(lib, q.device.index)
    p = S.SjAttentionParams()
    lib.fn("sj_attention_params_init")(byref(p))
    _fill_dense(p, q, k, v, layout, causal, sm_scale,
                (family, qk_quant, pv_accum, smooth_k, smooth_v,
                 causal_align), "sageattn")
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if return_lse else None
    size = c_size_t()
    lib.check(lib.fn("sj_attention_workspace_size")(ctx, byref(p),
                                                    byref(size)),
              "sj_attention", ctx)
    ws = torch.empty(size.value, dtype=torch.uint8, device=q.device)
    p.workspace = ws.data_ptr()
    p.workspace_size = size.value
    stream = _current_stream(q.device)
    lib.check(lib.fn("sj_attention")(ctx, byref(p), stream), "sj_attention",
              ctx)
    _tls.last = (lib, ctx, p)  # for _keep_plan (an eager sageattn call)
    return o, lse


# ------------------------------------------------------- varlen: the kernel
def _check_cu(fn: str, name: str, t: Any, device: Any,
              allow_cpu: bool) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s(): %s must be a torch.Tensor (got %s)"
                        % (fn, name, type(t).__name__))
    if t.dtype != torch.int32 or t.dim() != 1 or t.numel() < 2:
        raise invalid_argument(
            "%s must be a 1-D torch.int32 tensor of batch + 1 prefix sums "
            "(got %s of shape %s)" % (name, t.dtype, tuple(t.shape)),
            fn + "()")
    if t.device != device and not (allow_cpu and t.device.type == "cpu"):
        raise invalid_argument(
            "%s must be on the device of q (%s), not %s"
            % (name, device, t.device), fn + "()")
    if not t.is_contiguous():
        raise invalid_argument("%s must be contiguous" % name, fn + "()")


def _max_seqlen(fn: str, name: str, value: Any) -> Any:
    if isinstance(value, bool) or isinstance(value, torch.Tensor):
        raise TypeError("%s(): %s must be a Python int (got %s); use "
                        "int(t.max()) once, outside the hot loop"
                        % (fn, name, type(value).__name__))
    if isinstance(value, int):
        return value
    symint = getattr(torch, "SymInt", None)
    if symint is not None and isinstance(value, symint):
        return value
    try:
        return operator.index(value)  # numpy integers and the like
    except TypeError:
        raise TypeError("%s(): %s must be an int (got %r)"
                        % (fn, name, value)) from None


def _token_strides(name: str, t: Any, fn: str) -> Tuple[int, int]:
    """(token, head) element strides; a stride 0 means "contiguous" to the
    C API, so a broadcast (stride 0, size > 1) view is rejected."""
    st = t.stride()
    for i, what in ((0, "token"), (1, "head")):
        if st[i] == 0 and t.size(i) > 1:
            raise invalid_argument(
                "%s is a broadcast view (stride 0 along its %s dimension); "
                "pass %s.contiguous()" % (name, what, name), fn + "()")
    return st[0], st[1]


def _fill_varlen(p: S.SjVarlenParams, q: Any, k: Any, v: Any,
                 cu_q: Any, max_q: int, max_k: int, causal: bool,
                 sm_scale: float, opts: Sequence[int], trust: bool,
                 fn: str) -> None:
    p.dtype = _dtype_code(q.dtype)
    p.batch = cu_q.numel() - 1
    p.heads_q, p.heads_kv, p.head_dim = q.size(1), k.size(1), q.size(2)
    p.total_q, p.total_kv = q.size(0), k.size(0)
    p.max_seqlen_q, p.max_seqlen_kv = max_q, max_k
    p.trust_cu_seqlens = 1 if trust else 0
    p.q_stride_token, p.q_stride_head = _token_strides("q", q, fn)
    p.k_stride_token, p.k_stride_head = _token_strides("k", k, fn)
    p.v_stride_token, p.v_stride_head = _token_strides("v", v, fn)
    p.o_stride_token, p.o_stride_head = q.size(1) * q.size(2), q.size(2)
    p.causal = 1 if causal else 0
    p.sm_scale = sm_scale
    (p.family, p.qk_quant, p.pv_accum, p.smooth_k, p.smooth_v,
     p.causal_align) = opts


def _validate_varlen(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any,
                     max_q: int, max_k: int, causal: bool, sm_scale: float,
                     return_lse: bool, opts: Sequence[int], fn: str) -> None:
    """As :func:`_validate_dense`; host (CPU) prefix sums are passed as the
    host copies, so the library checks their values too."""
    try:
        lib = _lib.get()
    except Exception:
        return
    if not lib.has("sj_attention_varlen_workspace_size"):
        return
    ctx = _lib.contexts.validator(lib)
    if ctx is None:
        return
    p = S.SjVarlenParams()
    lib.fn("sj_varlen_params_init")(byref(p))
    _fill_varlen(p, q, k, v, cu_q, max_q, max_k, causal, sm_scale, opts,
                 False, fn)
    p.q, p.k, p.v, p.o = (_FAKE_PTR, 2 * _FAKE_PTR, 3 * _FAKE_PTR,
                          4 * _FAKE_PTR)
    p.cu_seqlens_q, p.cu_seqlens_kv = 6 * _FAKE_PTR, 7 * _FAKE_PTR
    if cu_q.device.type == "cpu" and cu_k.device.type == "cpu":
        p.cu_seqlens_q_host = cu_q.data_ptr()
        p.cu_seqlens_kv_host = cu_k.data_ptr()
    else:
        p.trust_cu_seqlens = 1  # no values to look at
    p.lse = 5 * _FAKE_PTR if return_lse else None
    size = c_size_t()
    st = lib.fn("sj_attention_varlen_workspace_size")(ctx, byref(p),
                                                      byref(size))
    lib.check(st, "sj_attention_varlen", ctx)


def _varlen_impl(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int,
                 max_k: int, causal: bool, sm_scale: float, return_lse: bool,
                 family: int, qk_quant: int, pv_accum: int, smooth_k: int,
                 smooth_v: int, causal_align: int,
                 validate_cu_seqlens: bool) -> Tuple[Any, Any]:
    """Runs ``sj_attention_varlen``; returns (o, lse[heads_q, total_q])."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.size(1), q.size(0)) if return_lse else (0,),
                      dtype=torch.float32, device=q.device)
    if q.device.type != "cuda" or o.numel() == 0:
        return o, lse
    if validate_cu_seqlens and torch.cuda.is_current_stream_capturing():
        raise invalid_argument(
            "validate_cu_seqlens=True copies cu_seqlens to the host (a "
            "synchronization), which CUDA graph capture forbids; pass "
            "validate_cu_seqlens=False when capturing", "sageattn_varlen()")
    lib = _lib.get()
    ctx = _lib.contexts.get(lib, q.device.index)
    p = S.SjVarlenParams()
    lib.fn("sj_varlen_params_init")(byref(p))
    _fill_varlen(p, q, k, v, cu_q, max_q, max_k, causal, sm_scale,
                 (family, qk_quant, pv_accum, smooth_k, smooth_v,
                  causal_align), not validate_cu_seqlens, "sageattn_varlen")
    p.cu_seqlens_q, p.cu_seqlens_kv = cu_q.data_ptr(), cu_k.data_ptr()
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if return_lse else None
    stream = _current_stream(q.device)
    size = c_size_t()
    lib.check(lib.fn("sj_attention_varlen_workspace_size")(ctx, byref(p),
                                                           byref(size)),
              "sj_attention_varlen", ctx)
    ws = torch.empty(size.value, dtype=torch.uint8, device=q.device)
    p.workspace = ws.data_ptr()
    p.workspace_size = size.value
    lib.check(lib.fn("sj_attention_varlen")(ctx, byref(p), stream),
              "sj_attention_varlen", ctx)
    return o, lse


# --------------------------------------------------- dense: repeated calls
# Everything of a dense call but its tensors' addresses follows from the
# tensors' shapes, strides, dtypes and devices and from the other
# arguments: the checks, the C parameters and the workspace size.  Each
# thread keeps, per such key, the parameters filled by its first call (a
# call that passed every check and ran) and the workspace size; a later
# call with the same key sets the pointers and launches.  The values'
# types are part of the key (``True == 1 == 1.0``), so a call whose
# arguments the checks would refuse never matches a cached one, and only
# immutable kinds of argument make a key (a 0-d tensor as ``is_causal``
# could change its truth value between calls).  The least recently used
# of more than 64 keys per thread is dropped.
_PLANS_MAX = 64
_tls = threading.local()


class _Plan:
    __slots__ = ("lib", "ctx", "params", "run", "lse_shape")

    def __init__(self, lib: Any, ctx: Any, params: Any, run: Any,
                 lse_shape: Optional[Tuple[int, int, int]]) -> None:
        self.lib, self.ctx, self.params = lib, ctx, params
        self.run, self.lse_shape = run, lse_shape


def _plans() -> "OrderedDict[Any, _Plan]":
    d = getattr(_tls, "plans", None)
    if d is None:
        d = _tls.plans = OrderedDict()
    return d


def _clear_plans() -> None:
    """Forgets this thread's cached calls (tests; a reloaded library is
    detected without it)."""
    _plans().clear()


_FLAG_TYPES = (bool, int)
_SCALE_TYPES = (type(None), float, int)
_OPTION_TYPES = (type(None), str, bool, int)


def _call_key(q: Any, k: Any, v: Any, tensor_layout: Any, is_causal: Any,
              sm_scale: Any, return_lse: Any, options: Dict[str, Any]) -> Any:
    """What a dense call's checks and C parameters depend on; None if an
    argument is of a kind that could change or is not hashable (the full
    path decides)."""
    if type(tensor_layout) is not str or \
            type(is_causal) not in _FLAG_TYPES or \
            type(return_lse) not in _FLAG_TYPES or \
            type(sm_scale) not in _SCALE_TYPES:
        return None
    for x in options.values():
        if type(x) not in _OPTION_TYPES:
            return None
    try:
        key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(),
               k.dtype, k.device, v.shape, v.stride(), v.dtype, v.device,
               type(tensor_layout), tensor_layout, type(is_causal), is_causal,
               type(sm_scale), sm_scale, type(return_lse), return_lse,
               tuple((n, type(x), x) for n, x in options.items())
               if options else ())
        hash(key)
    except Exception:  # e.g. an unhashable option value
        return None
    return key


def _dense_key(q: Any, k: Any, v: Any, tensor_layout: Any, is_causal: Any,
               sm_scale: Any, return_lse: Any,
               options: Dict[str, Any]) -> Any:
    """The key of a dense call that may take the short path: plain CUDA
    tensors (no subclasses); None for anything else."""
    t = torch.Tensor
    if type(q) is not t or type(k) is not t or type(v) is not t:
        return None
    if q.device.type != "cuda":
        return None
    return _call_key(q, k, v, tensor_layout, is_causal, sm_scale,
                     return_lse, options)


def _dense_fast(key: Any, q: Any, k: Any, v: Any) -> Any:
    """Runs a call whose key this thread has run before; None if it has
    not (or the library was reloaded since)."""
    plans = _plans()
    plan = plans.get(key)
    if plan is None:
        return None
    lib = _lib.get()
    if plan.lib is not lib or \
            _lib.contexts.get(lib, q.device.index) is not plan.ctx:
        del plans[key]
        return None
    plans.move_to_end(key)
    dev = q.device
    p = plan.params
    # everything allocated before the shared structure is written
    o = torch.empty(q.shape, dtype=q.dtype, device=dev)
    lse = None
    if plan.lse_shape is not None:
        lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=dev)
    ws = torch.empty(p.workspace_size, dtype=torch.uint8, device=dev)
    stream = _current_stream(dev)
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    if lse is not None:
        p.lse = lse.data_ptr()
    p.workspace = ws.data_ptr()
    lib.check(plan.run(plan.ctx, byref(p), stream), "sj_attention", plan.ctx)
    return (o, lse) if lse is not None else o


def _keep_plan(key: Any, lse_shape: Optional[Tuple[int, int, int]]) -> None:
    """After a call that ran through :func:`_attention_impl` on this
    thread: its filled parameters (workspace size included), kept for the
    next call with the same key.  Never raises: the call has run."""
    last = getattr(_tls, "last", None)
    _tls.last = None
    if last is None:
        return
    try:
        lib, ctx, p = last
        plans = _plans()
        plans[key] = _Plan(lib, ctx, p, lib.fn("sj_attention"), lse_shape)
        while len(plans) > _PLANS_MAX:
            plans.popitem(last=False)
    except Exception:  # pragma: no cover - a later call takes the full path
        pass


# --------------------------------------------- custom ops / direct dispatch
_ATTENTION_OP: Any = None
_VARLEN_OP: Any = None
_OP_DEFS: list = []


def _no_backward_apply(impl: Any, args: Tuple[Any, ...]) -> Tuple[Any, Any]:
    """Direct call (eager mode, or torch < 2.4).  When autograd records the call, the output
    gets a node whose backward raises, as a custom op without an autograd
    formula does: the forward works, a backward fails loudly."""
    if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _NoBackward.apply(impl, *args)
    return impl(*args)


if torch is not None:

    class _NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, impl: Any, *args: Any) -> Any:  # type: ignore[override]
            o, lse = impl(*args)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
            raise RuntimeError(
                "sagejit attention is inference-only: it has no backward. "
                "Run it under torch.no_grad() / torch.inference_mode(), or "
                "use F.scaled_dot_product_attention for training.")

    def _direct(impl: Any) -> Any:
        """``impl`` behind the no-backward guard; kept out of TorchDynamo's
        tracing on torch 2.0-2.3 (a graph break instead of an error)."""
        def call(*args: Any) -> Tuple[Any, Any]:
            return _no_backward_apply(impl, args)
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        return disable(call) if disable is not None else call

    def _register_ops() -> None:
        """Registers sagejit::attention and sagejit::attention_varlen with
        fake implementations (torch >= 2.4)."""
        global _ATTENTION_OP, _VARLEN_OP
        library = torch.library
        if not (hasattr(library, "custom_op")
                and hasattr(library, "register_fake")):
            return
        Tensor = torch.Tensor

        def attention(q: Tensor, k: Tensor, v: Tensor, layout: int,
                      causal: bool, sm_scale: float, return_lse: bool,
                      family: int, qk_quant: int, pv_accum: int,
                      smooth_k: int, smooth_v: int,
                      causal_align: int) -> Tuple[Tensor, Tensor]:
            return _attention_impl(q, k, v, layout, causal, sm_scale,
                                   return_lse, family, qk_quant, pv_accum,
                                   smooth_k, smooth_v, causal_align)

        def attention_fake(q: Tensor, k: Tensor, v: Tensor, layout: int,
                           causal: bool, sm_scale: float, return_lse: bool,
                           family: int, qk_quant: int, pv_accum: int,
                           smooth_k: int, smooth_v: int,
                           causal_align: int) -> Tuple[Tensor, Tensor]:
            b, hq, nq, _ = _dense_dims(q, layout)
            o = q.new_empty(q.shape)
            lse = q.new_empty((b, hq, nq) if return_lse else (0,),
                              dtype=torch.float32)
            return o, lse

        def attention_varlen(q: Tensor, k: Tensor, v: Tensor,
                             cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                             max_seqlen_q: int, max_seqlen_k: int,
                             causal: bool, sm_scale: float,
                             return_lse: bool, family: int, qk_quant: int,
                             pv_accum: int, smooth_k: int, smooth_v: int,
                             causal_align: int,
                             validate_cu_seqlens: bool
                             ) -> Tuple[Tensor, Tensor]:
            return _varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                max_seqlen_q, max_seqlen_k, causal, sm_scale,
                                return_lse, family, qk_quant, pv_accum,
                                smooth_k, smooth_v, causal_align,
                                validate_cu_seqlens)

        def attention_varlen_fake(q: Tensor, k: Tensor, v: Tensor,
                                  cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                                  max_seqlen_q: int, max_seqlen_k: int,
                                  causal: bool, sm_scale: float,
                                  return_lse: bool, family: int,
                                  qk_quant: int, pv_accum: int,
                                  smooth_k: int, smooth_v: int,
                                  causal_align: int,
                                  validate_cu_seqlens: bool
                                  ) -> Tuple[Tensor, Tensor]:
            o = q.new_empty(q.shape)
            lse = q.new_empty((q.size(1), q.size(0)) if return_lse else (0,),
                              dtype=torch.float32)
            return o, lse

        # Ask compilers to hand the op its inputs with the strides eager
        # mode has (the kernels read views in place and need a contiguous
        # head_dim).
        extra: Dict[str, Any] = {}
        tag = getattr(torch.Tag, "needs_exact_strides", None) or getattr(
            torch.Tag, "needs_fixed_stride_order", None)
        if tag is not None and "tags" in inspect.signature(
                library.custom_op).parameters:
            extra["tags"] = (tag,)
        try:
            op = library.custom_op("sagejit::attention", attention,
                                   mutates_args=(), **extra)
            op.register_fake(attention_fake)
            vop = library.custom_op("sagejit::attention_varlen",
                                    attention_varlen, mutates_args=(),
                                    **extra)
            vop.register_fake(attention_varlen_fake)
        except Exception as e:  # pragma: no cover - depends on torch
            import warnings
            warnings.warn("sagejit: registering the torch custom ops failed "
                          "(%s: %s); calling the library directly"
                          % (type(e).__name__, e), RuntimeWarning)
            return
        # Call the OpOverloads: TorchDynamo puts them in the graph as is.
        _ATTENTION_OP = torch.ops.sagejit.attention.default
        _VARLEN_OP = torch.ops.sagejit.attention_varlen.default
        _OP_DEFS.extend((op, vop))  # keep the definitions alive

    _register_ops()
    if _ATTENTION_OP is None:  # (torch.compiler.disable imports dynamo)
        _DIRECT_ATTENTION = _direct(_attention_impl)
        _DIRECT_VARLEN = _direct(_varlen_impl)


def _tracing() -> bool:
    """True while TorchDynamo traces (torch.compile, torch.export).  Eager
    calls skip the custom op: its first call in a process costs seconds of
    imports (dynamo, sympy) inside torch's dispatcher, while the library
    call itself takes milliseconds.  torch.compiler.is_compiling() reads a
    flag in eager mode and is a constant True under Dynamo."""
    comp = getattr(torch, "compiler", None)
    is_compiling = getattr(comp, "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def uses_custom_op() -> bool:
    """Whether calls go through ``torch.ops.sagejit.*`` (torch >= 2.4)."""
    return _ATTENTION_OP is not None


# -------------------------------------------------------------- public API
def sageattn(q: Any, k: Any, v: Any, tensor_layout: str = "HND",
             is_causal: bool = False, sm_scale: Optional[float] = None,
             return_lse: bool = False,
             **options: Any) -> Union[Any, Tuple[Any, Any]]:
    """Quantized attention, a drop-in for SageAttention's ``sageattn``.

    Args:
        q: ``[batch, heads_q, seq_q, head_dim]`` (HND) or
            ``[batch, seq_q, heads_q, head_dim]`` (NHD), float16 or bfloat16,
            on a CUDA device.  Any strides whose last dimension is 1 (views
            such as ``x.transpose(1, 2)`` are read in place, never copied).
        k, v: the same layout with ``heads_kv`` heads (``heads_q`` a
            multiple of it: grouped-query attention) and ``seq_kv`` rows;
            same dtype and device as q.
        tensor_layout: ``"HND"`` or ``"NHD"``.
        is_causal: causal mask (see ``causal_alignment``).
        sm_scale: softmax scale; ``None`` means ``1/sqrt(head_dim)``.
        return_lse: also return the natural-log log-sum-exp of the scaled
            scores, fp32 ``[batch, heads_q, seq_q]`` (as SageAttention).

    Keyword options (``None`` / absent: the library's default for the
    family):
        qk_quant_gran: ``"per_block"``, ``"per_warp"`` or ``"per_thread"``.
        pv_accum_dtype: ``"fp32"``, ``"fp32+fp32"``, ``"fp16+fp32"``,
            ``"fp32+fp16"``, ``"fp32+fp32+splitv"`` (fp8pv and wgmma:
            V as two e4m3 terms, the more accurate FP8 P.V), ``"pv16"``
            (wgmma: P and V in 16 bits, the FP16 family's accuracy),
            ``"pvi8"`` (wgmma and fp8pv: P and V in INT8, per-tile P
            scales) or ``"pvi8+splitv"`` (wgmma's default, and fp8pv's on
            sm_90: pvi8 for the heads whose V suits it, split V for the
            others, chosen per call).
        smooth_k: subtract the per-channel mean of K (default on).
        smooth_v: subtract the mean of V (fp32 accumulations only).
        causal_alignment: ``"top_left"`` (default; SageAttention and
            PyTorch) or ``"bottom_right"`` (FlashAttention) when
            ``seq_q != seq_kv``.
        family: ``"auto"``, ``"fp16pv"``, ``"fp8pv"`` or ``"wgmma"`` (sm_90a).

    Any other keyword raises ``TypeError``.

    Returns:
        ``o`` with q's shape, layout and dtype (contiguous), or
        ``(o, lse)`` when ``return_lse``.

    Raises:
        TypeError: unknown keyword, or an argument of the wrong type.
        InvalidArgumentError (a ValueError): bad layout, dtype, device,
            shapes, strides or ``sm_scale``; UnsupportedError (also a
            ValueError) for what the library does not support, e.g. a head
            dimension other than 32, 64, 96, 128 or 256.
        SageJitError: the library failed (CUDA, compilation, ...); the
            message carries the status name and the library's detail.
    """
    fn = "sageattn"
    key = None
    if _ATTENTION_OP is not None and not _tracing():
        key = _dense_key(q, k, v, tensor_layout, is_causal, sm_scale,
                         return_lse, options)
        if key is not None and not (torch.is_grad_enabled() and (
                q.requires_grad or k.requires_grad or v.requires_grad)):
            out = _dense_fast(key, q, k, v)
            if out is not None:
                return out
        else:
            key = None
    opts = _parse_options(fn, options, _OPTIONS)
    if tensor_layout not in _LAYOUTS:
        raise invalid_argument(
            "tensor_layout must be 'HND' or 'NHD' (got %r)" % (tensor_layout,),
            fn + "()")
    layout = _LAYOUTS[tensor_layout]
    scale = _scale(fn, sm_scale)
    causal = bool(is_causal)
    want_lse = bool(return_lse)
    _need_torch(fn)
    _check_tensors(fn, (("q", q), ("k", k), ("v", v)), 4, tensor_layout)
    if k.shape != v.shape:
        raise invalid_argument(
            "k and v must have the same shape (k %s, v %s)"
            % (tuple(k.shape), tuple(v.shape)), fn + "()")
    bq, hq, _, dq = _dense_dims(q, layout)
    bk, hk, _, dk = _dense_dims(k, layout)
    if bq != bk:
        raise invalid_argument(
            "q and k must have the same batch size (q %d, k %d; tensor_layout"
            "=%r)" % (bq, bk, tensor_layout), fn + "()")
    if dq != dk:
        raise invalid_argument(
            "q, k and v must have the same head_dim (q %d, k and v %d)"
            % (dq, dk), fn + "()")
    if hk == 0 or hq % hk:
        raise invalid_argument(
            "heads_q (%d) must be a multiple of heads_kv (%d) (tensor_layout"
            "=%r)" % (hq, hk, tensor_layout), fn + "()")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _dense_stride_tuple(name, t, layout, fn)  # refuses broadcast views
    if q.device.type != "cuda":
        _validate_dense(q, k, v, layout, causal, scale, want_lse, opts, fn)
        if q.device.type != "meta":
            raise _device_error(fn, q.device)
    args = (q, k, v, layout, causal, scale, want_lse) + tuple(opts)
    if _ATTENTION_OP is None:
        o, lse = _DIRECT_ATTENTION(*args)
    elif _tracing():
        o, lse = _ATTENTION_OP(*args)
    else:
        _tls.last = None
        o, lse = _no_backward_apply(_attention_impl, args)
        if key is not None:
            _keep_plan(key, tuple(lse.shape) if want_lse else None)
    return (o, lse) if want_lse else o


def sageattn_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any,
                    cu_seqlens_k: Any, max_seqlen_q: int, max_seqlen_k: int,
                    is_causal: bool = False,
                    sm_scale: Optional[float] = None,
                    return_lse: bool = False,
                    **options: Any) -> Union[Any, Tuple[Any, Any]]:
    """Attention over packed variable-length sequences, as SageAttention's
    ``sageattn_varlen`` and FlashAttention's ``flash_attn_varlen_func``.

    Args:
        q: ``[total_q, heads_q, head_dim]``, sequence ``i`` owning rows
            ``cu_seqlens_q[i]:cu_seqlens_q[i+1]``; float16 or bfloat16 on a
            CUDA device; last dimension contiguous.
        k, v: ``[total_kv, heads_kv, head_dim]``.
        cu_seqlens_q, cu_seqlens_k: int32 prefix sums (``batch + 1``
            entries, first 0, last the total), on q's device.
        max_seqlen_q, max_seqlen_k: Python ints, at least every sequence's
            length.
        is_causal: per-sequence causal mask (``causal_alignment`` as in
            :func:`sageattn`; FlashAttention's varlen is ``"bottom_right"``).
        sm_scale: softmax scale; ``None`` means ``1/sqrt(head_dim)``.
        return_lse: also return the LSE, fp32 ``[heads_q, total_q]``.

    Keyword options: those of :func:`sageattn`, plus
        validate_cu_seqlens (default True): the library copies the prefix
            sums to the host and checks them, which synchronizes the stream.
            ``False`` skips that (no synchronization: required under CUDA
            graph capture); the kernels clamp every index, so wrong prefix
            sums give wrong numbers but never out-of-bounds accesses.

    Returns:
        ``o`` ``[total_q, heads_q, head_dim]`` in q's dtype, or
        ``(o, lse)`` when ``return_lse``.
    """
    fn = "sageattn_varlen"
    opts = _parse_options(fn, options, _VARLEN_OPTIONS)
    validate = options.get("validate_cu_seqlens", True)
    if not isinstance(validate, (bool, int)):
        raise TypeError("%s(): validate_cu_seqlens must be a bool (got %r)"
                        % (fn, validate))
    scale = _scale(fn, sm_scale)
    causal = bool(is_causal)
    want_lse = bool(return_lse)
    _need_torch(fn)
    _check_tensors(fn, (("q", q), ("k", k), ("v", v)), 3, None)
    if k.shape != v.shape:
        raise invalid_argument(
            "k and v must have the same shape (k %s, v %s)"
            % (tuple(k.shape), tuple(v.shape)), fn + "()")
    if q.size(2) != k.size(2):
        raise invalid_argument(
            "q, k and v must have the same head_dim (q %d, k and v %d)"
            % (q.size(2), k.size(2)), fn + "()")
    if k.size(1) == 0 or q.size(1) % k.size(1):
        raise invalid_argument(
            "heads_q (%d) must be a multiple of heads_kv (%d)"
            % (q.size(1), k.size(1)), fn + "()")
    max_q = _max_seqlen(fn, "max_seqlen_q", max_seqlen_q)
    max_k = _max_seqlen(fn, "max_seqlen_k", max_seqlen_k)
    on_cuda = q.device.type == "cuda"
    # On a GPU the prefix sums must be on q's device; a call that cannot run
    # (CPU or meta tensors) may also give them on the CPU.
    _check_cu(fn, "cu_seqlens_q", cu_seqlens_q, q.device, not on_cuda)
    _check_cu(fn, "cu_seqlens_k", cu_seqlens_k, q.device, not on_cuda)
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise invalid_argument(
            "cu_seqlens_q and cu_seqlens_k must have the same length (batch "
            "+ 1): %d and %d" % (cu_seqlens_q.numel(), cu_seqlens_k.numel()),
            fn + "()")
    if not on_cuda:
        _validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                         causal, scale, want_lse, opts, fn)
        if q.device.type != "meta":
            raise _device_error(fn, q.device)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, scale,
            want_lse) + tuple(opts) + (bool(validate),)
    if _VARLEN_OP is None:
        o, lse = _DIRECT_VARLEN(*args)
    elif _tracing():
        o, lse = _VARLEN_OP(*args)
    else:
        o, lse = _no_backward_apply(_varlen_impl, args)
    return (o, lse) if want_lse else o
