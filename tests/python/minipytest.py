#!/usr/bin/env python3
"""A small stand-in for pytest, for machines without it.

    python3 tests/python/minipytest.py [-x] [-k SUBSTRING] [PATH ...]

Runs the ``test_*.py`` files of this folder (or the given files/folders)
with the subset of pytest they use: ``pytest.skip``, ``pytest.importorskip``,
``pytest.raises(match=)``, ``pytest.mark.parametrize`` / ``skipif`` and the
``tmp_path`` fixture.  When the real pytest is importable it is used instead
(``python3 -m pytest`` with the same arguments) unless MINIPYTEST_FORCE is
set.  Prints pytest's closing
line ("N passed, N failed, N skipped") and exits 1 if anything failed.
"""

import contextlib
import importlib.util
import inspect
import itertools
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = Path(__file__).resolve().parent


class Skipped(Exception):
    """pytest.skip()."""


class Failed(AssertionError):
    """pytest.fail()."""


class _RaisesInfo:
    value: Any = None
    type: Any = None


@contextlib.contextmanager
def _raises(expected: Any, match: Optional[str] = None) -> Iterator[Any]:
    info = _RaisesInfo()
    try:
        yield info
    except expected as e:
        info.value, info.type = e, type(e)
        if match is not None and not re.search(match, str(e)):
            raise AssertionError("Regex %r does not match %r"
                                 % (match, str(e))) from e
        return
    raise AssertionError("DID NOT RAISE %s" % (expected,))


def _skip(reason: str = "", allow_module_level: bool = False) -> None:
    raise Skipped(reason)


def _fail(reason: str = "") -> None:
    raise Failed(reason)


def _importorskip(name: str, reason: Optional[str] = None) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise Skipped(reason or "could not import %r: %s" % (name, e))


def _mark(kind: str) -> Callable[..., Any]:
    def marker(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        def apply(fn: Any) -> Any:
            fn.__dict__.setdefault("_marks", []).insert(0, (kind, args,
                                                            kwargs))
            return fn
        return apply
    return marker


def install_fake_pytest() -> None:
    """Puts a ``pytest`` module with the subset above into sys.modules."""
    mod = types.ModuleType("pytest")
    mod.skip = _skip  # type: ignore[attr-defined]
    mod.fail = _fail  # type: ignore[attr-defined]
    mod.raises = _raises  # type: ignore[attr-defined]
    mod.importorskip = _importorskip  # type: ignore[attr-defined]
    mark = types.SimpleNamespace(parametrize=_mark("parametrize"),
                                 skipif=_mark("skipif"))
    mod.mark = mark  # type: ignore[attr-defined]
    sys.modules["pytest"] = mod


def _cases(fn: Any) -> List[Tuple[str, Dict[str, Any], Optional[str]]]:
    """(id, kwargs, skip reason) for each parametrized case of ``fn``."""
    axes: List[List[Tuple[str, Dict[str, Any]]]] = []
    skip = None
    for kind, args, kwargs in getattr(fn, "_marks", []):
        if kind == "skipif":
            if args[0]:
                skip = kwargs.get("reason", "skipif")
        elif kind == "parametrize":
            names = [n.strip() for n in args[0].split(",")]
            axis = []
            for value in args[1]:
                values = value if len(names) > 1 else (value,)
                axis.append(("-".join(str(v) for v in values),
                             dict(zip(names, values))))
            axes.append(axis)
    out = []
    for combo in itertools.product(*axes) if axes else [()]:
        kwargs: Dict[str, Any] = {}
        for _, kw in combo:
            kwargs.update(kw)
        ident = "-".join(i for i, _ in combo)
        out.append((ident, kwargs, skip))
    return out


def run(paths: List[str], stop_first: bool, pattern: str) -> int:
    files: List[Path] = []
    for p in paths or [str(HERE)]:
        path = Path(p)
        files += sorted(path.glob("test_*.py")) if path.is_dir() else [path]
    sys.path.insert(0, str(HERE))
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures: List[str] = []
    start = time.time()
    for f in files:
        name = f.stem
        spec = importlib.util.spec_from_file_location(name, f)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Skipped as e:
            print("%s: SKIPPED (%s)" % (f.name, e))
            counts["skipped"] += 1
            continue
        except Exception:
            failures.append("%s (import)\n%s" % (f.name,
                                                 traceback.format_exc()))
            counts["failed"] += 1
            continue
        tests = [(n, fn) for n, fn in vars(module).items()
                 if n.startswith("test_") and inspect.isfunction(fn)
                 and fn.__module__ == module.__name__]
        tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
        for tname, fn in tests:
            for ident, kwargs, skip in _cases(fn):
                full = "%s::%s%s" % (f.name, tname,
                                     "[%s]" % ident if ident else "")
                if pattern and pattern not in full:
                    continue
                if skip:
                    counts["skipped"] += 1
                    print("%s SKIPPED (%s)" % (full, skip))
                    continue
                tmp = None
                if "tmp_path" in inspect.signature(fn).parameters:
                    tmp = Path(tempfile.mkdtemp(prefix="minipytest-"))
                    kwargs = dict(kwargs, tmp_path=tmp)
                t0 = time.time()
                try:
                    fn(**kwargs)
                    counts["passed"] += 1
                    print("%s PASSED (%.1fs)" % (full, time.time() - t0))
                except Skipped as e:
                    counts["skipped"] += 1
                    print("%s SKIPPED (%s)" % (full, e))
                except BaseException:
                    counts["failed"] += 1
                    print("%s FAILED" % full)
                    failures.append("%s\n%s" % (full,
                                                traceback.format_exc()))
                finally:
                    if tmp is not None:
                        shutil.rmtree(tmp, ignore_errors=True)
                sys.stdout.flush()
                if stop_first and counts["failed"]:
                    break
            if stop_first and counts["failed"]:
                break
        if stop_first and counts["failed"]:
            break
    for text in failures:
        print("=" * 70 + "\nFAILED " + text)
    summary = ", ".join("%d %s" % (n, k) for k, n in counts.items() if n)
    print("%s in %.2fs" % (summary or "no tests ran", time.time() - start))
    return 1 if counts["failed"] else 0


def main(argv: List[str]) -> int:
    stop_first, pattern, paths = False, "", []
    it = iter(argv)
    for a in it:
        if a in ("-x", "--exitfirst"):
            stop_first = True
        elif a == "-k":
            pattern = next(it, "")
        elif a in ("-q", "-v", "-s", "-rs"):
            pass
        else:
            paths.append(a)
    try:
        if os.environ.get("MINIPYTEST_FORCE"):
            raise ImportError("forced")
        import pytest  # noqa: F401
    except ImportError:
        install_fake_pytest()
        return run(paths, stop_first, pattern)
    import subprocess
    return subprocess.call([sys.executable, "-m", "pytest"] + argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
