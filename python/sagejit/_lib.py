"""Finding, loading and calling ``libsagejit.so`` through ctypes.

Nothing here runs at import time: the library is looked for on the first
call that needs it, so ``import sagejit`` works on any machine.  Where it is
looked for, in order:

1. ``$SAGEJIT_LIBRARY`` -- a path to the shared library (or to a folder that
   holds ``libsagejit.so``).  When set, it is the only candidate.
2. ``libsagejit.so*`` in the package's own folder (a copy installed next to
   ``sagejit/__init__.py``).
3. The dynamic loader: ``ctypes.util.find_library("sagejit")``, then
   ``libsagejit.so.0`` and ``libsagejit.so`` (``LD_LIBRARY_PATH``, the
   ``ldconfig`` cache, the system folders).

The library's ``sj_version_number()`` must have the package's major.minor.
"""

import ctypes
import ctypes.util
import glob
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_size_t, c_void_p
from typing import Any, Dict, List, Optional, Tuple

from . import _structs as S
from ._errors import (
    LibraryNotFoundError,
    LibraryVersionError,
    SageJitError,
    error_for_status,
)

#: The package's version; the library must have the same major.minor.
PACKAGE_VERSION = "0.1.0"
EXPECTED_MAJOR, EXPECTED_MINOR = (int(x) for x in PACKAGE_VERSION.split(".")[:2])

ENV_LIBRARY = "SAGEJIT_LIBRARY"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

_ctx_p = c_void_p  # sj_context *

# name -> (restype, argtypes).  Every published function of sagejit.h that
# the package uses; they are bound on first use, so a library without one of
# them (an older build) still serves the others.
_PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "sj_version_number": (c_int, []),
    "sj_version": (c_char_p, []),
    "sj_status_string": (c_char_p, [c_int]),
    "sj_status_name": (c_char_p, [c_int]),
    "sj_config_init": (None, [POINTER(S.SjConfig)]),
    "sj_context_create": (c_int, [POINTER(_ctx_p), POINTER(S.SjConfig)]),
    "sj_context_create_error": (c_char_p, []),
    "sj_context_destroy": (None, [_ctx_p]),
    "sj_context_last_error": (c_char_p, [_ctx_p]),
    "sj_context_target": (c_char_p, [_ctx_p]),
    "sj_context_family": (c_int, [_ctx_p]),
    "sj_context_cache_path": (c_char_p, [_ctx_p]),
    "sj_context_get_stats": (c_int, [_ctx_p, POINTER(S.SjStats)]),
    "sj_context_reset_stats": (c_int, [_ctx_p]),
    "sj_attention_params_init": (None, [POINTER(S.SjAttentionParams)]),
    "sj_attention": (c_int, [_ctx_p, POINTER(S.SjAttentionParams), c_void_p]),
    "sj_attention_workspace_size": (
        c_int, [_ctx_p, POINTER(S.SjAttentionParams), POINTER(c_size_t)]),
    "sj_attention_reference": (
        c_int, [_ctx_p, POINTER(S.SjAttentionParams), c_void_p, c_void_p]),
    "sj_varlen_params_init": (None, [POINTER(S.SjVarlenParams)]),
    "sj_attention_varlen": (c_int, [_ctx_p, POINTER(S.SjVarlenParams), c_void_p]),
    "sj_attention_varlen_workspace_size": (
        c_int, [_ctx_p, POINTER(S.SjVarlenParams), POINTER(c_size_t)]),
    "sj_check": (c_int, [_ctx_p, POINTER(S.SjCheckCase),
                         POINTER(S.SjCheckResult)]),
    "sj_bench": (c_int, [_ctx_p, POINTER(S.SjBenchCase),
                         POINTER(S.SjBenchResult)]),
    "sj_warm": (c_int, [_ctx_p, POINTER(S.SjWarmRequest),
                        POINTER(S.SjWarmResult)]),
    "sj_nvrtc_version": (c_int, [POINTER(c_int), POINTER(c_int)]),
    "sj_driver_info": (c_int, [POINTER(c_int), POINTER(c_int)]),
    "sj_device_get_info": (c_int, [c_int, POINTER(S.SjDeviceInfo)]),
    "sj_target_for_cc": (c_int, [c_int, c_int, c_char_p, c_size_t]),
    "sj_cache_get_info": (c_int, [_ctx_p, POINTER(S.SjCacheInfo)]),
    "sj_cache_list": (c_int, [_ctx_p, S.CACHE_LIST_FN, c_void_p]),
    "sj_cache_verify": (c_int, [_ctx_p, POINTER(c_int64), POINTER(c_int64),
                                POINTER(c_int64)]),
    "sj_cache_prune": (c_int, [_ctx_p, c_int64, POINTER(c_int64)]),
    "sj_cache_clear": (c_int, [_ctx_p, POINTER(c_int64)]),
    "sj_cache_export": (c_int, [_ctx_p, c_char_p, POINTER(c_char_p), c_size_t,
                                POINTER(c_int64)]),
    "sj_cache_import": (c_int, [_ctx_p, c_char_p, POINTER(c_int64),
                                POINTER(c_int64)]),
}


def _text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


class Library:
    """A loaded ``libsagejit`` with typed access to its functions."""

    def __init__(self, cdll: ctypes.CDLL, path: str, source: str) -> None:
        self.cdll = cdll
        #: the file that was loaded (resolved through /proc/self/maps when
        #: the loader found it by name)
        self.path = _resolved_path(path)
        #: where it came from: "SAGEJIT_LIBRARY", "package" or "loader"
        self.source = source
        self._fns: Dict[str, Any] = {}
        self.version_number: int = self.fn("sj_version_number")()
        self.version: str = _text(self.fn("sj_version")())

    def has(self, name: str) -> bool:
        """Whether the library exports ``name``."""
        try:
            getattr(self.cdll, name)
        except AttributeError:
            return False
        return True

    def fn(self, name: str) -> Any:
        """The C function ``name`` with its prototype set.

        Raises SageJitError if this library does not export it (an older
        build than the package).
        """
        f = self._fns.get(name)
        if f is not None:
            return f
        try:
            f = getattr(self.cdll, name)
        except AttributeError:
            raise SageJitError(
                "%s does not export %s (library version %s): it is older than "
                "this package (%s) expects; rebuild and reinstall libsagejit"
                % (self.path, name, getattr(self, "version", "?"),
                   PACKAGE_VERSION),
                function=name) from None
        restype, argtypes = _PROTOTYPES[name]
        f.restype = restype
        f.argtypes = argtypes
        self._fns[name] = f
        return f

    # ------------------------------------------------------------ statuses
    def status_name(self, st: int) -> str:
        return _text(self.fn("sj_status_name")(st))

    def status_string(self, st: int) -> str:
        return _text(self.fn("sj_status_string")(st))

    def error(self, st: int, function: str, detail: str) -> SageJitError:
        """The exception for status ``st`` returned by ``function``."""
        return error_for_status(st, function, detail,
                                status_name=self.status_name(st),
                                status_text=self.status_string(st))

    def check(self, st: int, function: str, ctx: Optional[c_void_p] = None,
              detail: Optional[str] = None) -> None:
        """Raises the right SageJitError unless ``st`` is SJ_OK.

        The detail is ``detail`` if given, else the context's last error.
        """
        if st == S.SJ_OK:
            return
        if detail is None:
            detail = self.last_error(ctx) if ctx else ""
        raise self.error(st, function, detail)

    def last_error(self, ctx: c_void_p) -> str:
        return _text(self.fn("sj_context_last_error")(ctx))

    # ------------------------------------------------------------ contexts
    def create_context(self, device: int, target: Optional[str] = None,
                       family: int = S.SJ_FAMILY_AUTO,
                       cache_disabled: bool = False,
                       cache_dir: Optional[str] = None) -> c_void_p:
        """``sj_context_create`` with a config; raises on failure."""
        cfg = S.SjConfig()
        self.fn("sj_config_init")(byref(cfg))
        cfg.device = device
        cfg.family = family
        cfg.cache_disabled = 1 if cache_disabled else 0
        # Keep the encoded strings alive for the duration of the call.
        target_b = target.encode() if target else None
        dir_b = os.fsencode(cache_dir) if cache_dir else None
        cfg.target = target_b
        cfg.cache_dir = dir_b
        ctx = c_void_p()
        st = self.fn("sj_context_create")(byref(ctx), byref(cfg))
        if st != S.SJ_OK:
            detail = _text(self.fn("sj_context_create_error")())
            what = ("a compile-only context for %s" % target
                    if device == S.SJ_DEVICE_NONE
                    else "a context on CUDA device %d" % device)
            raise self.error(st, "sj_context_create (%s)" % what, detail)
        return ctx


def _resolved_path(path: str) -> str:
    """The absolute file of a loaded library named ``path``."""
    if os.path.isabs(path):
        return path
    base = os.path.basename(path).split(".so")[0]
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    p = parts[5].strip()
                    if os.path.basename(p).startswith(base + ".so"):
                        return p
    except OSError:
        pass
    return path


# ------------------------------------------------------------------ loading
def candidates(environ: Optional[Dict[str, str]] = None,
               package_dir: str = PACKAGE_DIR) -> List[Tuple[str, str]]:
    """The ``(source, path or name)`` pairs tried, in order."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_LIBRARY, "")
    if explicit:
        if os.path.isdir(explicit):
            found = _package_libs(explicit)
            return [(ENV_LIBRARY, found[0] if found
                     else os.path.join(explicit, "libsagejit.so"))]
        return [(ENV_LIBRARY, explicit)]
    out = [("package", p) for p in _package_libs(package_dir)]
    names: List[str] = []
    found = ctypes.util.find_library("sagejit")
    for n in (found, "libsagejit.so.0", "libsagejit.so"):
        if n and n not in names:
            names.append(n)
    out += [("loader", n) for n in names]
    return out


def _package_libs(folder: str) -> List[str]:
    """``libsagejit.so*`` files of ``folder``, best first."""
    files = glob.glob(os.path.join(folder, "libsagejit.so*"))

    def rank(p: str) -> Tuple[int, str]:
        name = os.path.basename(p)
        return ({"libsagejit.so": 0, "libsagejit.so.0": 1}.get(name, 2), name)

    return sorted(files, key=rank)


_FIX_HINT = (
    "Build the C library (cmake -S . -B build && cmake --build build) and "
    "either set SAGEJIT_LIBRARY=/path/to/libsagejit.so, copy libsagejit.so "
    "into %s, or install it where the dynamic loader finds it (cmake "
    "--install build, or LD_LIBRARY_PATH)." % PACKAGE_DIR)


def load(environ: Optional[Dict[str, str]] = None,
         package_dir: str = PACKAGE_DIR) -> Library:
    """Finds and loads the library (no caching); raises
    LibraryNotFoundError or LibraryVersionError."""
    tried: List[Tuple[str, str]] = []
    for source, cand in candidates(environ, package_dir):
        label = "%s (%s)" % (cand, "$" + source if source == ENV_LIBRARY
                             else source)
        if source != "loader" and not os.path.exists(cand):
            tried.append((label, "no such file"))
            continue
        try:
            cdll = ctypes.CDLL(cand)
        except OSError as e:
            tried.append((label, str(e)))
            continue
        try:
            getattr(cdll, "sj_version_number")
        except AttributeError:
            tried.append((label, "not libsagejit: no sj_version_number"))
            continue
        lib = Library(cdll, cand, source)
        major = lib.version_number // 1000000
        minor = lib.version_number // 1000 % 1000
        if (major, minor) != (EXPECTED_MAJOR, EXPECTED_MINOR):
            raise LibraryVersionError(
                "libsagejit at %s is version %s, but this sagejit package "
                "(%s) needs %d.%d.x; install matching versions of the "
                "package and the library (or point SAGEJIT_LIBRARY at the "
                "right one)" % (lib.path, lib.version, PACKAGE_VERSION,
                                EXPECTED_MAJOR, EXPECTED_MINOR),
                function="sj_version_number")
        return lib
    lines = "\n".join("  - %s: %s" % t for t in tried)
    raise LibraryNotFoundError(
        "libsagejit could not be loaded.  Tried, in order:\n%s\n%s"
        % (lines or "  (nothing)", _FIX_HINT), tried=tried)


_lock = threading.Lock()
_library: Optional[Library] = None
_load_error: Optional[SageJitError] = None


def get() -> Library:
    """The process's library, loaded on first use (a failure is remembered;
    :func:`reload` tries again)."""
    global _library, _load_error
    lib = _library
    if lib is not None:
        return lib
    with _lock:
        if _library is None:
            if _load_error is not None:
                raise _load_error
            try:
                _library = load()
            except SageJitError as e:
                _load_error = e
                raise
        return _library


def reload(path: Optional[str] = None) -> Library:
    """Forgets the loaded library (and every context) and loads again,
    from ``path`` when given (as if ``SAGEJIT_LIBRARY`` were set)."""
    global _library, _load_error
    with _lock:
        contexts.forget()
        _library = None
        _load_error = None
        env = dict(os.environ)
        if path is not None:
            env[ENV_LIBRARY] = path
        try:
            _library = load(env)
        except SageJitError as e:
            _load_error = e
            raise
        return _library


# ----------------------------------------------------------------- contexts
#: Target of the compile-only context that validates arguments of calls that
#: cannot run (meta or CPU tensors): every option is valid on it.
VALIDATION_TARGET = "sm_90a"


class _Contexts:
    """One library context per CUDA device ordinal, created lazily."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_device: Dict[int, c_void_p] = {}
        self._validator: Optional[c_void_p] = None
        self._validator_failed = False

    def get(self, lib: Library, device: int) -> c_void_p:
        """The context of CUDA device ``device`` (created on first use)."""
        ctx = self._by_device.get(device)
        if ctx is not None:
            return ctx
        with self._lock:
            ctx = self._by_device.get(device)
            if ctx is None:
                ctx = lib.create_context(device)
                self._by_device[device] = ctx
            return ctx

    def validator(self, lib: Library) -> Optional[c_void_p]:
        """A compile-only, cache-less context used to validate parameters
        without a device; None if it cannot be created."""
        if self._validator is not None or self._validator_failed:
            return self._validator
        with self._lock:
            if self._validator is None and not self._validator_failed:
                try:
                    self._validator = lib.create_context(
                        S.SJ_DEVICE_NONE, target=VALIDATION_TARGET,
                        family=S.SJ_FAMILY_FP16PV, cache_disabled=True)
                except SageJitError:
                    self._validator_failed = True
            return self._validator

    def live(self) -> Dict[int, c_void_p]:
        """The device contexts created so far."""
        with self._lock:
            return dict(self._by_device)

    def forget(self) -> None:
        """Drops every context without destroying it (the library may be
        unloaded; the process owns the memory until it exits)."""
        with self._lock:
            self._by_device.clear()
            self._validator = None
            self._validator_failed = False


contexts = _Contexts()

