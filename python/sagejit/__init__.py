"""sagejit: SageAttention-class quantized attention, JIT-compiled.

A thin ctypes layer over ``libsagejit.so`` (the C library of this project):
no compile step of its own.  ``import sagejit`` always works; the library is
looked for on the first call that needs it (``SAGEJIT_LIBRARY``, then a
``libsagejit.so*`` next to this file, then the dynamic loader) and a missing
library, GPU or PyTorch is reported by that call.

    >>> import sagejit
    >>> o = sagejit.sageattn(q, k, v, tensor_layout="HND", is_causal=True)

See docs/python.md.
"""

from ._errors import (
    InvalidArgumentError,
    LibraryNotFoundError,
    LibraryVersionError,
    OutOfMemoryError,
    SageJitError,
    UnsupportedError,
)
from ._info import info, library_path, library_version, stats, warm
from ._lib import PACKAGE_VERSION as __version__
from ._lib import reload as load_library
from .attention import sageattn, sageattn_varlen, uses_custom_op

__all__ = [
    "__version__",
    "sageattn",
    "sageattn_varlen",
    "info",
    "warm",
    "stats",
    "library_path",
    "library_version",
    "load_library",
    "uses_custom_op",
    "SageJitError",
    "LibraryNotFoundError",
    "LibraryVersionError",
    "InvalidArgumentError",
    "UnsupportedError",
    "OutOfMemoryError",
]
