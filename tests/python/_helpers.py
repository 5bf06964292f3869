"""Shared helpers of the Python tests (imported by every test module).

Puts ``python/`` of this checkout on ``sys.path`` when ``sagejit`` is not
importable yet, and finds the library under test: ``$SAGEJIT_LIBRARY`` (set
by CTest), else ``build/libsagejit.so`` or ``build-gpu/libsagejit.so`` of
this checkout.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "python"
HEADER = ROOT / "include" / "sagejit.h"

try:
    import sagejit  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PYTHON_DIR))


def library_under_test() -> Optional[str]:
    """The libsagejit the tests use, or None (tests that need it skip)."""
    env = os.environ.get("SAGEJIT_LIBRARY")
    if env:
        return env if os.path.exists(env) else None
    for build in ("build", "build-gpu"):
        p = ROOT / build / "libsagejit.so"
        if p.exists():
            os.environ["SAGEJIT_LIBRARY"] = str(p)
            return str(p)
    return None


def c_compiler() -> Optional[str]:
    """A C compiler, or None."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return shutil.which(cc)
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def run_python(code: str, env: Dict[str, str],
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter (this one) with exactly ``env``
    on top of a minimal environment."""
    base = {k: v for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR",
                     "SAGEJIT_CACHE_DIR", "CUDA_VISIBLE_DEVICES")}
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], env=base,
                          capture_output=True, text=True, timeout=timeout)


def copy_package(dest: Path) -> Path:
    """Copies the ``sagejit`` package (sources only) into ``dest``; returns
    the folder to put on PYTHONPATH."""
    src = PYTHON_DIR / "sagejit"
    shutil.copytree(src, dest / "sagejit",
                    ignore=shutil.ignore_patterns("__pycache__",
                                                  "libsagejit.so*"))
    return dest
