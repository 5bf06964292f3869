"""The ctypes mirrors match include/sagejit.h as the C compiler lays it out:
every struct's size, alignment, and every field's offset and size; field
names and order; constants; and the argument counts of the prototypes."""

import ctypes
import re
import subprocess
from typing import Dict, List, Tuple

import pytest

from _helpers import HEADER, c_compiler

from sagejit import _lib
from sagejit import _structs as S


def _header_text() -> str:
    """The header without comments and preprocessor lines."""
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#.*?(?<!\\)$", " ", text, flags=re.M | re.S)


def _header_structs() -> Dict[str, List[str]]:
    """struct name -> field names in order, parsed from the header."""
    text = _header_text()
    out: Dict[str, List[str]] = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;",
                         text, re.S):
        names: List[str] = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            for part in decl.split(","):
                part = re.sub(r"\[[^\]]*\]", "", part).strip()
                names.append(re.findall(r"(\w+)\s*$", part)[0])
        out[m.group(3)] = names
    return out


def test_field_names_match_header() -> None:
    structs = _header_structs()
    assert set(S.C_STRUCTS) <= set(structs), "unknown struct names"
    missing = sorted(set(structs) - set(S.C_STRUCTS))
    assert not missing, "structs of sagejit.h not mirrored: %s" % missing
    for name, cls in S.C_STRUCTS.items():
        mine = [f for f, _ in cls._fields_]
        assert mine == structs[name], name


def test_status_map_matches_header() -> None:
    text = HEADER.read_text()
    entries = re.findall(r"X\((SJ_\w+),\s*(\d+),", text)
    assert len(entries) >= 15
    assert {int(v): n for n, v in entries} == S.STATUS_NAMES


def test_header_version_matches_package() -> None:
    text = HEADER.read_text()
    major = int(re.search(r"#define SAGEJIT_VERSION_MAJOR (\d+)", text)[1])
    minor = int(re.search(r"#define SAGEJIT_VERSION_MINOR (\d+)", text)[1])
    assert (major, minor) == (_lib.EXPECTED_MAJOR, _lib.EXPECTED_MINOR)


def _prototypes() -> Dict[str, int]:
    """function name -> number of parameters, from the header."""
    text = " ".join(_header_text().split())
    out = {}
    for m in re.finditer(r"SJ_API\s+[^;()]*?\b(\w+)\s*\(([^;]*?)\)\s*;", text):
        args = m.group(2).strip()
        out[m.group(1)] = 0 if args in ("", "void") else args.count(",") + 1
    return out


def test_prototypes_match_header() -> None:
    protos = _prototypes()
    assert "sj_attention" in protos and "sj_warm" in protos
    for name, (_, argtypes) in _lib._PROTOTYPES.items():
        assert name in protos, "%s is not declared in sagejit.h" % name
        assert len(argtypes) == protos[name], name


def _c_program() -> Tuple[str, Dict[str, Tuple[int, int]],
                          Dict[str, Tuple[int, int]]]:
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             '#include "sagejit.h"', "int main(void) {"]
    expect_struct: Dict[str, Tuple[int, int]] = {}
    expect_field: Dict[str, Tuple[int, int]] = {}
    for cname, cls in S.C_STRUCTS.items():
        lines.append('  printf("S %s %%zu %%zu\\n", sizeof(%s), '
                     "_Alignof(%s));" % (cname, cname, cname))
        expect_struct[cname] = (ctypes.sizeof(cls), ctypes.alignment(cls))
        for fname, _ in cls._fields_:
            lines.append(
                '  printf("F %s.%s %%zu %%zu\\n", offsetof(%s, %s), '
                "sizeof(((%s *)0)->%s));"
                % (cname, fname, cname, fname, cname, fname))
            desc = getattr(cls, fname)
            expect_field["%s.%s" % (cname, fname)] = (desc.offset, desc.size)
    for name in sorted(S.C_CONSTANTS):
        lines.append('  printf("C %s %%lld\\n", (long long)(%s));'
                     % (name, name))
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n", expect_struct, expect_field


def test_layouts_match_the_c_compiler(tmp_path) -> None:
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    src, expect_struct, expect_field = _c_program()
    (tmp_path / "layout.c").write_text(src)
    exe = tmp_path / "layout"
    build = subprocess.run(
        [cc, "-std=c11", "-Wall", "-I", str(HEADER.parent), "-o", str(exe),
         str(tmp_path / "layout.c")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True,
                         check=True).stdout
    seen = 0
    for line in out.splitlines():
        kind, name, *vals = line.split()
        if kind == "S":
            assert expect_struct[name] == (int(vals[0]), int(vals[1])), \
                "%s: ctypes (size, align) %s, C %s" % (
                    name, expect_struct[name], vals)
        elif kind == "F":
            assert expect_field[name] == (int(vals[0]), int(vals[1])), \
                "%s: ctypes (offset, size) %s, C %s" % (
                    name, expect_field[name], vals)
        else:
            assert S.C_CONSTANTS[name] == int(vals[0]), name
        seen += 1
    assert seen == len(expect_struct) + len(expect_field) + len(S.C_CONSTANTS)
