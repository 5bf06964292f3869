"""Library discovery and the import contract: ``import sagejit`` works
without the library, without a GPU and without torch; calls say what was
tried and how to fix it; the discovery order is SAGEJIT_LIBRARY, the
package folder, the dynamic loader; the version is checked."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from _helpers import PYTHON_DIR, c_compiler, copy_package, library_under_test
from _helpers import run_python

import sagejit
from sagejit import _lib


def _need_library() -> str:
    lib = library_under_test()
    if lib is None:
        pytest.skip("libsagejit not built (set SAGEJIT_LIBRARY)")
    return lib


REPORT = ("import json, sagejit\n"
          "i = sagejit.info()\n"
          "print(json.dumps(i['library']))\n")


def test_import_without_library_and_clear_error() -> None:
    missing = "/nonexistent/dir/libsagejit.so"
    code = ("import sagejit\n"
            "print('imported')\n"
            "try:\n"
            "    sagejit.library_version()\n"
            "except sagejit.LibraryNotFoundError as e:\n"
            "    print('ERROR', e)\n")
    r = run_python(code, {"SAGEJIT_LIBRARY": missing,
                          "PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0, r.stderr
    assert "imported" in r.stdout
    assert "ERROR" in r.stdout
    assert missing in r.stdout and "no such file" in r.stdout
    assert "SAGEJIT_LIBRARY" in r.stdout  # says how to fix it


def test_info_reports_a_missing_library() -> None:
    r = run_python(REPORT, {"SAGEJIT_LIBRARY": "/nonexistent/libsagejit.so",
                            "PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0, r.stderr
    assert "error" in json.loads(r.stdout.splitlines()[-1])


def test_import_without_torch() -> None:
    # torch made unimportable: the package imports, info() works, and
    # attention says what is missing.
    code = ("import sys\n"
            "sys.modules['torch'] = None\n"
            "import sagejit\n"
            "sagejit.info()\n"
            "try:\n"
            "    sagejit.sageattn(1, 2, 3)\n"
            "except ImportError as e:\n"
            "    print('ERROR', e)\n")
    r = run_python(code, {"SAGEJIT_LIBRARY": "/nonexistent/libsagejit.so",
                          "PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0, r.stderr
    assert "ERROR" in r.stdout and "PyTorch" in r.stdout


def test_sagejit_library_env(tmp_path: Path) -> None:
    lib = _need_library()
    r = run_python(REPORT, {"SAGEJIT_LIBRARY": lib,
                            "PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["source"] == "SAGEJIT_LIBRARY"
    assert got["version"] == sagejit.__version__
    # a folder holding the library works too
    folder = tmp_path / "libdir"
    folder.mkdir()
    shutil.copy(lib, folder / "libsagejit.so")
    r = run_python(REPORT, {"SAGEJIT_LIBRARY": str(folder),
                            "PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["path"] == str(folder / "libsagejit.so")


def test_library_next_to_the_package(tmp_path: Path) -> None:
    lib = _need_library()
    root = copy_package(tmp_path / "site")
    shutil.copy(lib, root / "sagejit" / "libsagejit.so.0")
    r = run_python(REPORT, {"PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["source"] == "package"
    assert got["path"] == str(root / "sagejit" / "libsagejit.so.0")


def test_sagejit_library_wins_over_the_package(tmp_path: Path) -> None:
    lib = _need_library()
    root = copy_package(tmp_path / "site")
    # a file that is not a library: it must not even be looked at
    (root / "sagejit" / "libsagejit.so").write_text("not a library")
    r = run_python(REPORT, {"PYTHONPATH": str(root),
                            "SAGEJIT_LIBRARY": lib})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["source"] == \
        "SAGEJIT_LIBRARY"


def test_dynamic_loader_last(tmp_path: Path) -> None:
    lib = _need_library()
    root = copy_package(tmp_path / "site")
    ld = tmp_path / "ld"
    ld.mkdir()
    shutil.copy(lib, ld / "libsagejit.so.0")
    r = run_python(REPORT, {"PYTHONPATH": str(root),
                            "LD_LIBRARY_PATH": str(ld)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["source"] == "loader"
    assert got["path"] == str(ld / "libsagejit.so.0")


def test_candidate_order(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("libsagejit.so.0.1.0", "libsagejit.so", "libsagejit.so.0"):
        (pkg / name).write_text("")
    got = _lib.candidates({}, str(pkg))
    assert [s for s, _ in got[:3]] == ["package"] * 3
    assert [Path(p).name for _, p in got[:3]] == [
        "libsagejit.so", "libsagejit.so.0", "libsagejit.so.0.1.0"]
    assert all(s == "loader" for s, _ in got[3:]) and len(got) > 3
    assert _lib.candidates({"SAGEJIT_LIBRARY": "/x/libsagejit.so"},
                           str(pkg)) == [("SAGEJIT_LIBRARY",
                                          "/x/libsagejit.so")]


def test_nothing_found_lists_every_attempt(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "libsagejit.so").write_text("not a library")
    with pytest.raises(sagejit.LibraryNotFoundError) as info:
        # the loader candidates are real names: make them fail by pointing
        # at nothing but the broken file
        _lib.load({"SAGEJIT_LIBRARY": str(pkg / "libsagejit.so")}, str(pkg))
    err = info.value
    assert len(err.tried) == 1 and "libsagejit.so" in str(err)
    assert "cmake" in str(err)


def _fake_library(tmp_path: Path, version: int, text: str) -> Path:
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake.c"
    src.write_text(
        "int sj_version_number(void) { return %d; }\n"
        'const char *sj_version(void) { return "%s"; }\n' % (version, text))
    out = tmp_path / "libsagejit.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)],
                   check=True)
    return out


def test_version_mismatch(tmp_path: Path) -> None:
    fake = _fake_library(tmp_path, 2000000, "2.0.0")
    with pytest.raises(sagejit.LibraryVersionError, match="2.0.0"):
        _lib.load({"SAGEJIT_LIBRARY": str(fake)})


def test_missing_symbol_is_reported_on_use(tmp_path: Path) -> None:
    fake = _fake_library(tmp_path, 1000, "0.1.0")
    lib = _lib.load({"SAGEJIT_LIBRARY": str(fake)})
    assert lib.version == "0.1.0"
    assert not lib.has("sj_attention")
    with pytest.raises(sagejit.SageJitError, match="does not export"):
        lib.fn("sj_attention")
