"""ctypes mirrors of the types of ``include/sagejit.h``.

Every ``ctypes.Structure`` here lists the C struct's fields in the same order
with the same types; ``tests/python/test_structs.py`` compiles a C program
against the header and checks every size and offset, and that the field
names match the header's.  Enumerations are C ``int``s.
"""

from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)
from typing import Dict

# ------------------------------------------------------------------ status
SJ_OK = 0
SJ_ERR_INVALID_ARGUMENT = 1
SJ_ERR_UNSUPPORTED = 2
SJ_ERR_NO_DRIVER = 3
SJ_ERR_NO_NVRTC = 4
SJ_ERR_NO_DEVICE = 5
SJ_ERR_CUDA = 6
SJ_ERR_COMPILE = 7
SJ_ERR_OUT_OF_MEMORY = 8
SJ_ERR_CACHE = 9
SJ_ERR_IO = 10
SJ_ERR_MISUSE = 11
SJ_ERR_WORKSPACE = 12
SJ_ERR_INTERNAL = 13
SJ_ERR_BAD_FILE = 14

#: status value -> enumerator name, for messages when the library is absent.
STATUS_NAMES: Dict[int, str] = {
    value: name
    for name, value in globals().items()
    if name.startswith("SJ_ERR_") or name == "SJ_OK"
}

# ------------------------------------------------------------------- enums
SJ_LOG_OFF, SJ_LOG_ERROR, SJ_LOG_WARN, SJ_LOG_INFO, SJ_LOG_DEBUG = 0, 1, 2, 3, 4

SJ_DTYPE_FP16 = 1
SJ_DTYPE_BF16 = 2

SJ_LAYOUT_HND = 1
SJ_LAYOUT_NHD = 2

SJ_FAMILY_AUTO = 0
SJ_FAMILY_FP16PV = 1
SJ_FAMILY_FP8PV = 2
SJ_FAMILY_WGMMA = 3

SJ_QUANT_DEFAULT = 0
SJ_QUANT_PER_BLOCK = 1
SJ_QUANT_PER_WARP = 2
SJ_QUANT_PER_THREAD = 3

SJ_ACCUM_DEFAULT = 0
SJ_ACCUM_FP32 = 1
SJ_ACCUM_FP32_FP32 = 2
SJ_ACCUM_FP16_FP32 = 3
SJ_ACCUM_FP32_FP16 = 4
SJ_ACCUM_FP32_FP32_SPLITV = 5
SJ_ACCUM_PV16 = 6
SJ_ACCUM_PVI8 = 7
SJ_ACCUM_PVI8_SPLITV = 8

SJ_CAUSAL_TOP_LEFT = 0
SJ_CAUSAL_BOTTOM_RIGHT = 1

SJ_DEVICE_NONE = -1

# enum types (C enums are int-sized on every ABI sagejit supports)
sj_status = c_int
sj_log_level = c_int
sj_dtype = c_int
sj_layout = c_int
sj_family = c_int
sj_quant_gran = c_int
sj_pv_accum = c_int
sj_causal_align = c_int

# -------------------------------------------------------------- callbacks
#: void (*)(void *user, sj_log_level level, const char *line)
LOG_FN = CFUNCTYPE(None, c_void_p, sj_log_level, c_char_p)
#: void (*)(void *user, int64_t done, int64_t total, const char *target,
#:          const char *kernel, sj_status st)
WARM_PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_int64, c_int64, c_char_p,
                             c_char_p, sj_status)


# ----------------------------------------------------------------- structs
class SjConfig(Structure):
    """``sj_config``: how a context is created."""

    _fields_ = [
        ("cache_dir", c_char_p),
        ("cache_disabled", c_int),
        ("device", c_int),
        ("target", c_char_p),
        ("family", sj_family),
        ("log_fn", LOG_FN),
        ("log_user", c_void_p),
        ("log_level", sj_log_level),
    ]


class SjStats(Structure):
    """``sj_stats``: a context's counters."""

    _fields_ = [
        ("mem_hits", c_uint64),
        ("disk_hits", c_uint64),
        ("misses", c_uint64),
        ("compiles", c_uint64),
        ("compile_failures", c_uint64),
        ("compile_ms", c_double),
        ("load_ms", c_double),
        ("corrupt_entries", c_uint64),
        ("driver_rejects", c_uint64),
        ("cache_errors", c_uint64),
        ("launches", c_uint64),
    ]


class SjStrides(Structure):
    """``sj_strides``: element strides of a [batch, heads, seq, dim] view."""

    _fields_ = [("batch", c_int64), ("head", c_int64), ("seq", c_int64)]


class SjAttentionParams(Structure):
    """``sj_attention_params``: one dense attention call."""

    _fields_ = [
        ("dtype", sj_dtype),
        ("layout", sj_layout),
        ("batch", c_int64),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("seq_q", c_int64),
        ("seq_kv", c_int64),
        ("head_dim", c_int64),
        ("q", c_void_p),
        ("k", c_void_p),
        ("v", c_void_p),
        ("o", c_void_p),
        ("q_stride", SjStrides),
        ("k_stride", SjStrides),
        ("v_stride", SjStrides),
        ("o_stride", SjStrides),
        ("causal", c_int),
        ("causal_align", sj_causal_align),
        ("sm_scale", c_float),
        ("lse", c_void_p),  # float *
        ("family", sj_family),
        ("qk_quant", sj_quant_gran),
        ("pv_accum", sj_pv_accum),
        ("smooth_k", c_int),
        ("smooth_v", c_int),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
    ]


class SjVarlenParams(Structure):
    """``sj_varlen_params``: packed variable-length sequences."""

    _fields_ = [
        ("dtype", sj_dtype),
        ("batch", c_int64),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("head_dim", c_int64),
        ("total_q", c_int64),
        ("total_kv", c_int64),
        ("max_seqlen_q", c_int64),
        ("max_seqlen_kv", c_int64),
        ("cu_seqlens_q", c_void_p),  # const int32_t * (device)
        ("cu_seqlens_kv", c_void_p),
        ("cu_seqlens_q_host", c_void_p),  # const int32_t * (host)
        ("cu_seqlens_kv_host", c_void_p),
        ("trust_cu_seqlens", c_int),
        ("q", c_void_p),
        ("k", c_void_p),
        ("v", c_void_p),
        ("o", c_void_p),
        ("q_stride_token", c_int64),
        ("q_stride_head", c_int64),
        ("k_stride_token", c_int64),
        ("k_stride_head", c_int64),
        ("v_stride_token", c_int64),
        ("v_stride_head", c_int64),
        ("o_stride_token", c_int64),
        ("o_stride_head", c_int64),
        ("causal", c_int),
        ("causal_align", sj_causal_align),
        ("sm_scale", c_float),
        ("lse", c_void_p),  # float *
        ("family", sj_family),
        ("qk_quant", sj_quant_gran),
        ("pv_accum", sj_pv_accum),
        ("smooth_k", c_int),
        ("smooth_v", c_int),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
    ]


class SjCheckCase(Structure):
    """``sj_check_case``: one self-check case run on library-made data."""

    _fields_ = [
        ("params", SjAttentionParams),
        ("seed", c_uint64),
        ("k_bias", c_float),
        ("pad_strides", c_int),
        ("with_lse", c_int),
    ]


class SjCheckResult(Structure):
    """``sj_check_result``."""

    _fields_ = [
        ("rel_l2", c_double),
        ("cosine", c_double),
        ("max_abs_err", c_double),
        ("lse_max_abs_err", c_double),
        ("nonfinite", c_int64),
        ("elements", c_int64),
        ("lse_mismatch", c_int64),
    ]


class SjBenchCase(Structure):
    """``sj_bench_case``."""

    _fields_ = [
        ("params", SjAttentionParams),
        ("warmup", c_int),
        ("iters", c_int),
        ("sync_each", c_int),
    ]


class SjBenchResult(Structure):
    """``sj_bench_result``."""

    _fields_ = [
        ("e2e_ms", c_double),
        ("attn_ms", c_double),
        ("preprocess_ms", c_double),
        ("e2e_tops", c_double),
        ("attn_tops", c_double),
        ("host_us", c_double),
        ("flops", c_double),
    ]


class SjWarmRequest(Structure):
    """``sj_warm_request``: a matrix of kernels to precompile."""

    _fields_ = [
        ("targets", POINTER(c_char_p)),
        ("n_targets", c_size_t),
        ("head_dims", POINTER(c_int)),
        ("n_head_dims", c_size_t),
        ("causal", POINTER(c_int)),
        ("n_causal", c_size_t),
        ("dtypes", POINTER(sj_dtype)),
        ("n_dtypes", c_size_t),
        ("families", POINTER(sj_family)),
        ("n_families", c_size_t),
        ("quant", POINTER(sj_quant_gran)),
        ("n_quant", c_size_t),
        ("accum", POINTER(sj_pv_accum)),
        ("n_accum", c_size_t),
        ("jobs", c_int),
        ("progress", WARM_PROGRESS_FN),
        ("progress_user", c_void_p),
    ]


class SjWarmResult(Structure):
    """``sj_warm_result``."""

    _fields_ = [
        ("total", c_int64),
        ("compiled", c_int64),
        ("cached", c_int64),
        ("failed", c_int64),
        ("skipped", c_int64),
        ("seconds", c_double),
    ]


class SjDeviceInfo(Structure):
    """``sj_device_info``."""

    _fields_ = [
        ("name", c_char * 256),
        ("cc_major", c_int),
        ("cc_minor", c_int),
        ("multiprocessors", c_int),
        ("total_memory", c_size_t),
        ("target", c_char * 24),
    ]


class SjCacheInfo(Structure):
    """``sj_cache_info``."""

    _fields_ = [
        ("path", c_char * 4096),
        ("writable", c_int),
        ("schema_version", c_int),
        ("entries", c_int64),
        ("bytes", c_int64),
    ]


class SjCacheEntry(Structure):
    """``sj_cache_entry``: one row, as given to a cache-list callback."""

    _fields_ = [
        ("key", c_char * 33),
        ("target", c_char_p),
        ("kernel", c_char_p),
        ("kind", c_char_p),
        ("image_bytes", c_int64),
        ("compile_ms", c_double),
        ("created", c_int64),
        ("last_used", c_int64),
        ("hits", c_int64),
    ]


#: int (*)(void *user, const sj_cache_entry *e)
CACHE_LIST_FN = CFUNCTYPE(c_int, c_void_p, POINTER(SjCacheEntry))

#: Every mirrored struct, by its C name (used by the layout test).
C_STRUCTS = {
    "sj_config": SjConfig,
    "sj_stats": SjStats,
    "sj_strides": SjStrides,
    "sj_attention_params": SjAttentionParams,
    "sj_varlen_params": SjVarlenParams,
    "sj_check_case": SjCheckCase,
    "sj_check_result": SjCheckResult,
    "sj_bench_case": SjBenchCase,
    "sj_bench_result": SjBenchResult,
    "sj_warm_request": SjWarmRequest,
    "sj_warm_result": SjWarmResult,
    "sj_device_info": SjDeviceInfo,
    "sj_cache_info": SjCacheInfo,
    "sj_cache_entry": SjCacheEntry,
}

#: Every mirrored constant, by its C name (used by the layout test).
C_CONSTANTS = {
    name: value
    for name, value in globals().items()
    if name.startswith("SJ_") and isinstance(value, int)
}

