"""``info()``, ``warm()`` and small helpers over the library's environment,
device, cache and warm APIs."""

import threading
from ctypes import byref, c_char_p, c_int
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from . import _lib
from . import _structs as S
from ._errors import SageJitError, invalid_argument

__all__ = ["info", "warm", "library_path", "library_version", "stats"]

_FAMILY_NAMES = {S.SJ_FAMILY_AUTO: "auto", S.SJ_FAMILY_FP16PV: "fp16pv",
                 S.SJ_FAMILY_FP8PV: "fp8pv", S.SJ_FAMILY_WGMMA: "wgmma"}


def _text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


def library_path() -> str:
    """The path of the loaded ``libsagejit`` (loads it if needed)."""
    return _lib.get().path


def library_version() -> str:
    """The loaded library's version string, e.g. ``"0.1.0"``."""
    return _lib.get().version


def _stats_dict(lib: _lib.Library, ctx: Any) -> Dict[str, Any]:
    st = S.SjStats()
    lib.check(lib.fn("sj_context_get_stats")(ctx, byref(st)),
              "sj_context_get_stats", ctx)
    return {name: getattr(st, name) for name, _ in S.SjStats._fields_}


def stats(device: Optional[int] = None) -> Dict[str, Any]:
    """The counters of a device's context (``sj_context_get_stats``):
    memory/disk hits, misses, compiles, compile and load time, launches.

    ``device`` defaults to the current CUDA device.
    """
    lib = _lib.get()
    if device is None:
        import torch
        device = torch.cuda.current_device()
    return _stats_dict(lib, _lib.contexts.get(lib, int(device)))


def info() -> Dict[str, Any]:
    """What sagejit sees, as a dict (never raises for a missing GPU, NVRTC
    or library: those are reported).

    Keys: ``package``, ``library`` (path, version, source, or error),
    ``torch`` (version, CUDA version, CUDA available), ``nvrtc``, ``driver``,
    ``device_count``, ``devices`` (name, compute capability, memory, the
    target sagejit compiles for), ``cache`` (path, writable, schema version,
    entries, bytes) and ``contexts`` (the device contexts this process
    created: target, family, cache file, counters).
    """
    out: Dict[str, Any] = {"package": _lib.PACKAGE_VERSION}
    try:
        import torch
        out["torch"] = {"version": torch.__version__,
                        "cuda": getattr(torch.version, "cuda", None),
                        "cuda_available": bool(torch.cuda.is_available())}
    except ImportError:
        out["torch"] = None
    try:
        lib = _lib.get()
    except SageJitError as e:
        out["library"] = {"error": str(e)}
        return out
    out["library"] = {"path": lib.path, "version": lib.version,
                      "version_number": lib.version_number,
                      "source": lib.source}
    major, minor = c_int(), c_int()
    st = lib.fn("sj_nvrtc_version")(byref(major), byref(minor))
    out["nvrtc"] = ({"found": True, "version": "%d.%d" % (major.value,
                                                          minor.value)}
                    if st == S.SJ_OK else
                    {"found": False, "error": lib.status_string(st)})
    version, count = c_int(), c_int()
    st = lib.fn("sj_driver_info")(byref(version), byref(count))
    out["driver"] = ({"found": True, "version": version.value}
                     if st == S.SJ_OK else
                     {"found": False, "error": lib.status_string(st)})
    n = count.value if st == S.SJ_OK else 0
    out["device_count"] = n
    devices: List[Dict[str, Any]] = []
    for i in range(n):
        d = S.SjDeviceInfo()
        st = lib.fn("sj_device_get_info")(i, byref(d))
        if st != S.SJ_OK:
            devices.append({"ordinal": i, "error": lib.status_string(st)})
            continue
        devices.append({
            "ordinal": i, "name": _text(d.name),
            "compute_capability": "%d.%d" % (d.cc_major, d.cc_minor),
            "multiprocessors": d.multiprocessors,
            "total_memory": d.total_memory, "target": _text(d.target)})
    out["devices"] = devices
    out["cache"] = _cache_info(lib, devices)
    live = {}
    for ordinal, ctx in sorted(_lib.contexts.live().items()):
        live[ordinal] = {
            "target": _text(lib.fn("sj_context_target")(ctx)),
            "family": _FAMILY_NAMES.get(lib.fn("sj_context_family")(ctx),
                                        "?"),
            "cache_path": _text(lib.fn("sj_context_cache_path")(ctx)),
            "stats": _stats_dict(lib, ctx)}
    out["contexts"] = live
    return out


def _cache_info(lib: _lib.Library,
                devices: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The default cache, through a compile-only context (as `sagejit
    info`): the first device's target, else sm_80; the family is pinned so
    that SAGEJIT_FAMILY cannot make it fail."""
    target = "sm_80"
    if devices and devices[0].get("target", "").startswith(("sm_",
                                                            "compute_")):
        target = devices[0]["target"]
    try:
        ctx = lib.create_context(S.SJ_DEVICE_NONE, target=target,
                                 family=S.SJ_FAMILY_FP16PV)
    except SageJitError as e:
        return {"error": str(e)}
    try:
        ci = S.SjCacheInfo()
        st = lib.fn("sj_cache_get_info")(ctx, byref(ci))
        if st != S.SJ_OK:
            return {"error": str(lib.error(st, "sj_cache_get_info",
                                           lib.last_error(ctx)))}
        return {"path": _text(ci.path), "writable": bool(ci.writable),
                "schema_version": ci.schema_version,
                "entries": ci.entries, "bytes": ci.bytes}
    finally:
        lib.fn("sj_context_destroy")(ctx)


# --------------------------------------------------------------------- warm
_DTYPES = {"fp16": S.SJ_DTYPE_FP16, "float16": S.SJ_DTYPE_FP16,
           "bf16": S.SJ_DTYPE_BF16, "bfloat16": S.SJ_DTYPE_BF16}


def _codes(name: str, values: Optional[Iterable[Any]],
           table: Dict[str, int]) -> List[int]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out = []
    for v in values:
        key = str(v).strip().lower().replace("-", "_")
        if key not in table:
            key = key.replace("_", "+")
        if key not in table:
            raise invalid_argument("%s: unknown value %r (one of %s)"
                                   % (name, v, ", ".join(table)), "warm()")
        out.append(table[key])
    return out


def _array(ctype: Any, values: Sequence[Any]) -> Any:
    return (ctype * len(values))(*values) if values else None


def warm(head_dims: Optional[Iterable[int]] = None,
         causal: Optional[Iterable[bool]] = None,
         dtypes: Optional[Iterable[str]] = None,
         families: Optional[Iterable[str]] = None,
         qk_quant_grans: Optional[Iterable[str]] = None,
         pv_accum_dtypes: Optional[Iterable[str]] = None,
         targets: Optional[Iterable[str]] = None,
         device: Optional[int] = None, jobs: int = 0,
         progress: Optional[Callable[[int, int, str, str, str], None]] = None
         ) -> Dict[str, Any]:
    """Precompiles every kernel ``sageattn`` could need for a matrix of
    options into the on-disk cache (``sj_warm``), so later first calls only
    load kernels.

    Each axis left as ``None`` takes the library's default: head dims 64 and
    128, causal both ways, fp16 and bf16, the target's default family,
    quantization and accumulation.  ``targets`` (e.g. ``["sm_90a"]``)
    compiles for other GPUs without needing one: a compile-only context is
    used when ``targets`` is given and ``device`` is not; otherwise the
    context of ``device`` (default: the current CUDA device, or 0).
    ``progress(done, total, target, kernel, status_name)`` is called from the
    worker threads after each kernel.

    Returns a dict: total, compiled, cached, failed, skipped, seconds.
    Raises SageJitError if anything failed (the dict is ``e.result``).
    """
    from .attention import _ACCUM, _FAMILY, _QUANT
    lib = _lib.get()
    target_list = [str(t) for t in (targets or [])]
    hd = [int(x) for x in (head_dims or [])]
    cz = [1 if c else 0 for c in (causal if causal is not None else [])]
    dt = _codes("dtypes", dtypes, _DTYPES)
    fa = _codes("families", families, _FAMILY)
    qg = _codes("qk_quant_grans", qk_quant_grans, _QUANT)
    ac = _codes("pv_accum_dtypes", pv_accum_dtypes, _ACCUM)
    own_ctx = None
    if target_list and device is None:
        own_ctx = lib.create_context(S.SJ_DEVICE_NONE, target=target_list[0])
        ctx = own_ctx
    else:
        if device is None:
            device = 0
            try:
                import torch
                if torch.cuda.is_available():
                    device = torch.cuda.current_device()
            except ImportError:
                pass
        ctx = _lib.contexts.get(lib, int(device))
    req = S.SjWarmRequest()
    t_bytes = [t.encode() for t in target_list]
    req.targets = _array(c_char_p, t_bytes)
    req.n_targets = len(t_bytes)
    req.head_dims, req.n_head_dims = _array(c_int, hd), len(hd)
    req.causal, req.n_causal = _array(c_int, cz), len(cz)
    req.dtypes, req.n_dtypes = _array(c_int, dt), len(dt)
    req.families, req.n_families = _array(c_int, fa), len(fa)
    req.quant, req.n_quant = _array(c_int, qg), len(qg)
    req.accum, req.n_accum = _array(c_int, ac), len(ac)
    req.jobs = int(jobs)
    lock = threading.Lock()
    if progress is not None:
        def on_progress(user: Any, done: int, total: int, target: bytes,
                        kernel: bytes, st: int) -> None:
            try:
                with lock:
                    progress(done, total, _text(target), _text(kernel),
                             lib.status_name(st))
            except Exception:  # never let an exception cross into C
                pass
        cb = S.WARM_PROGRESS_FN(on_progress)
        req.progress = cb
    res = S.SjWarmResult()
    try:
        st = lib.fn("sj_warm")(ctx, byref(req), byref(res))
        result = {name: getattr(res, name) for name, _ in
                  S.SjWarmResult._fields_}
        if st != S.SJ_OK:
            err = lib.error(st, "sj_warm", lib.last_error(ctx))
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result
    finally:
        if own_ctx is not None:
            lib.fn("sj_context_destroy")(own_ctx)

