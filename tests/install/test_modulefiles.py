"""Module files' text (``install/modulefile.py``): a hostile value cannot change what a file does, run by the
real Lua and Tcl interpreters with the module commands recorded; and the default choice (the node's rule)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lockbuild.errors import InstallError
from lockbuild.install.moduledir import default_of
from lockbuild.install.modulefile import ModuleRecord, ModuleSpec, lua_string, read_record, render, tcl_string
from lockbuild.install.node import Node

HOSTILE = [
    '"]] os.execute("touch PWNED") [["',
    "]]\n os.execute('touch PWNED') --[[",
    "$(touch PWNED) `touch PWNED` ${HOME} $HOME",
    "[exec touch PWNED] {*}[list a b] \\[exec touch PWNED\\]",
    '"; exec touch PWNED; set x "',
    '"\nexec touch PWNED\n#',
    "}\nexec touch PWNED\nproc x {} {",
    "\\",
    "\\\\\\",
    "a\\u0041\\x41\\101\\n",
    "{",
    "}",
    "\r\t\x1b[31m\x7f",
    "é 漢字 \u202e",
    "x" * 4096,
    "",
]

LUA_RUNNER = r"""
local calls = {}
local function rec(name)
  return function(...)
    local t = {name}
    for _, v in ipairs({...}) do t[#t + 1] = v end
    calls[#calls + 1] = t
  end
end
whatis, help, prepend_path, pushenv = rec("whatis"), rec("help"), rec("prepend_path"), rec("pushenv")
local chunk = assert(loadfile(arg[1], "t", {whatis = whatis, help = help, prepend_path = prepend_path,
  pushenv = pushenv}))
chunk()
for _, t in ipairs(calls) do
  local hex = {}
  for i, v in ipairs(t) do hex[i] = (v:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
  print(table.concat(hex, " "))
end
"""

TCL_RUNNER = r"""
set calls {}
proc rec {name args} { global calls; lappend calls [list $name {*}$args] }
foreach c {module-whatis conflict prepend-path pushenv} { interp alias {} $c {} rec $c }
source -encoding utf-8 [lindex $argv 0]
rename puts _puts
proc puts {args} { rec puts {*}$args }
ModulesHelp
foreach t $calls {
  set hex {}
  foreach v $t { lappend hex [binary encode hex [encoding convertto utf-8 $v]] }
  _puts [join $hex " "]
}
"""


def spec(value: str, prefix: str = "/opt/engines/toy/1.0-cpu") -> ModuleSpec:
    record = ModuleRecord("toy", "1.0", "cpu", prefix, "install", 7, 1700000000, "3.12", "x86_64-manylinux_2_28", None)
    return ModuleSpec(record, "ab" * 32, ("K1", "K2"), "2025-01-06T00:00:00Z", (("VLLM_X", value), ("HF_Y", "1")))


def _decode(out: str) -> list[tuple[str, ...]]:
    rows = []
    for line in out.splitlines():
        rows.append(tuple(bytes.fromhex(h).decode() if h else "" for h in line.split(" ")))
    return rows


def run_lua(text: str, where: Path) -> list[tuple[str, ...]]:
    lua = shutil.which("lua5.3") or shutil.which("lua")
    if lua is None:
        pytest.skip("no lua interpreter (scripts/test installs Lmod, which brings lua5.3)")
    (where / "m.lua").write_text(text)
    (where / "run.lua").write_text(LUA_RUNNER)
    done = subprocess.run([lua, "run.lua", "m.lua"], cwd=where, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return _decode(done.stdout)


def run_tcl(text: str, where: Path) -> list[tuple[str, ...]]:
    tclsh = shutil.which("tclsh8.6") or shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("no tclsh (scripts/test installs Lmod, which brings tcl)")
    (where / "m").write_text(text, encoding="utf-8")
    (where / "run.tcl").write_text(TCL_RUNNER)
    done = subprocess.run([tclsh, "run.tcl", "m"], cwd=where, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return _decode(done.stdout)


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_value_is_one_string_in_lua(value: str, tmp_path: Path) -> None:
    s = spec(value, prefix=f"/opt/{value[:40]}")
    calls = run_lua(render(s, "lua"), tmp_path)
    assert calls[-3:] == [
        ("prepend_path", "PATH", f"/opt/{value[:40]}".rstrip("/") + "/bin"),
        ("pushenv", "VLLM_X", value),
        ("pushenv", "HF_Y", "1"),
    ]
    assert [c[0] for c in calls] == ["whatis"] * 7 + ["help", "prepend_path", "pushenv", "pushenv"]
    assert f"Sets VLLM_X={value}" in calls[7][1]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("value", [v for v in HOSTILE if all(ord(c) <= 0xFFFF for c in v)], ids=str)
def test_a_hostile_value_is_one_word_in_tcl(value: str, tmp_path: Path) -> None:
    s = spec(value, prefix=f"/opt/{value[:40]}")
    calls = run_tcl(render(s, "tcl"), tmp_path)
    assert ("pushenv", "VLLM_X", value) in calls
    assert ("prepend-path", "PATH", f"/opt/{value[:40]}".rstrip("/") + "/bin") in calls
    assert ("conflict", "toy") in calls
    assert ("puts", "stderr", f"Sets VLLM_X={value}") in calls
    kinds = [c[0] for c in calls]
    assert kinds == ["module-whatis"] * 7 + ["conflict", "prepend-path", "pushenv", "pushenv"] + ["puts"] * 7
    assert not (tmp_path / "PWNED").exists()


def test_quoting_leaves_nothing_the_languages_read_as_code() -> None:
    for value in HOSTILE:
        lua, tcl = lua_string(value)[1:-1], tcl_string(value)[1:-1]
        assert '"' not in lua.replace('\\"', "") and lua.isascii() and lua.isprintable(), lua
        assert not set(tcl) & set('"$[]{};\n\r'), tcl
        assert all(c == "\\" or c.isalnum() or c in " _-./:,=+%@()" for c in tcl)


def test_values_no_quoting_can_carry_are_refused() -> None:
    with pytest.raises(InstallError, match="NUL"):
        render(spec("a\0b"), "lua")
    with pytest.raises(InstallError, match="NUL"):
        render(spec("a\0b"), "tcl")
    with pytest.raises(InstallError, match="U\\+FFFF"):
        render(spec("a\U0001f600"), "tcl")
    assert lua_string("\U0001f600") == '"\\240\\159\\152\\128"'  # Lua carries the bytes exactly
    bad = ModuleSpec(spec("x").record, "ab", (), "t", (("A B", "1"),))
    with pytest.raises(InstallError, match="not a variable name"):
        render(bad, "lua")


def test_the_record_reads_back_and_a_foreign_file_has_none() -> None:
    s = spec("1")
    for fmt in ("lua", "tcl"):
        assert read_record(render(s, fmt)) == s.record  # type: ignore[arg-type]
    assert read_record("#%Module1.0\nsetenv X 1\n") is None
    assert read_record("-- lockbuild-record: !!!\n") is None


NO_GPU = Node("x86_64", "glibc", (2, 36), None, ())


def rec(version: str, variant: str, serial: int, gpu: bool = False) -> ModuleRecord:
    g = ((8, 0), "580", None) if gpu else None
    return ModuleRecord("toy", version, variant, f"/e/{version}-{variant}", "install", serial, serial, "3.12", "x", g)


def test_the_default_is_the_nodes_choice_newest_version_then_serial_then_variant() -> None:
    records = [rec("1.0", "cpu", 9), rec("1.1", "cpu", 1), rec("1.1", "avx", 1), rec("1.0", "zz", 10)]
    records = [ModuleRecord(**{**r.__dict__, "platform": "x86_64-manylinux_2_28"}) for r in records]
    assert default_of(records, NO_GPU, "auto").build_id == "1.1-avx"  # type: ignore[union-attr]
    newer = [*records, ModuleRecord(**{**records[0].__dict__, "version": "1.1", "variant": "new", "serial": 5})]
    assert default_of(newer, NO_GPU, "auto").build_id == "1.1-new"  # type: ignore[union-attr]
    gpu_only = [ModuleRecord(**{**rec("2.0", "cu", 1, gpu=True).__dict__, "platform": "x86_64-manylinux_2_28"})]
    assert default_of(gpu_only + records, NO_GPU, "auto").build_id == "1.1-avx"  # a CPU node takes a CPU build
    assert default_of(gpu_only, NO_GPU, "auto").build_id == "2.0-cu"  # none fits: the GPU rules aside
    assert default_of([], NO_GPU, "auto") is None
