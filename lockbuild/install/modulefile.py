"""A module file for an installed engine (``install``/``image --modulefiles``): its text for Lmod (Lua) or
Environment Modules (Tcl). Pure.

Every value from a bundle or the node is written as one quoted string of the module language, built here
only (:func:`lua_string`, :func:`tcl_string`); a value no quoting can carry is refused."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Literal

from lockbuild.bundle.manifest import Manifest
from lockbuild.documents import loads_json
from lockbuild.errors import InstallError
from lockbuild.times import iso

Format = Literal["lua", "tcl"]
FORMATS: tuple[Format, ...] = ("lua", "tcl")
RECORD_TAG = "lockbuild-record: "
TCL_HEADER = "#%Module1.0"
LUA_DEFAULT = "default"  # Lmod: a link to the default's file
TCL_DEFAULT = ".version"  # Environment Modules: names the default
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_LUA_PLAIN = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}
_TCL_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./:,=+%@()")


def format_of(text: str) -> Format:
    """``--modulefiles-format``'s value as one of :data:`FORMATS`; anything else is refused."""
    for fmt in FORMATS:
        if text == fmt:
            return fmt
    raise InstallError(
        f"--modulefiles-format: expected lua or tcl, found {text[:40]!r}.",
        tip="Pass --modulefiles-format lua (Lmod) or tcl (Environment Modules).",
    )


def _unquotable(value: str, why: str) -> InstallError:
    return InstallError(
        f"cannot write {value[:80]!r} into a module file: {why}.",
        tip="Rebuild the bundle without that value, or install without --modulefiles.",
    )


def lua_string(value: str) -> str:
    """``value`` as a Lua string literal that evaluates to exactly ``value`` and nothing else: ``"..."`` with
    every character but plain printable ASCII written as ``\\ddd`` bytes (never a long ``[[...]]`` string,
    which ``]]`` ends)."""
    if "\0" in value:
        raise _unquotable(value, "it holds a NUL, which no environment variable can carry")
    out = []
    for c in value:
        out.append(c if c in _LUA_PLAIN else "".join(f"\\{b:03d}" for b in c.encode()))
    return '"' + "".join(out) + '"'


def tcl_string(value: str) -> str:
    """``value`` as a Tcl word that evaluates to exactly ``value``: no substitution, no command, one word.
    ``"..."`` with every character but letters, digits and ``_-./:,=+%@()`` written as ``\\uXXXX``, so no
    ``$``, ``[``, ``]``, ``\\``, ``"``, brace or newline reaches the interpreter as itself."""
    if "\0" in value:
        raise _unquotable(value, "it holds a NUL, which no environment variable can carry")
    out = []
    for c in value:
        if c in _TCL_PLAIN:
            out.append(c)
        elif ord(c) <= 0xFFFF:
            out.append(f"\\u{ord(c):04x}")
        else:
            raise _unquotable(value, f"it holds {c!r} (beyond U+FFFF), which Tcl's quoting cannot carry exactly")
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class ModuleRecord:
    """What the default choice needs of one build: read back from the file's record line."""

    engine: str
    version: str
    variant: str
    prefix: str  # the environment, or the image's mount point
    kind: Literal["install", "image"]
    serial: int
    built: int  # the signed cut-off, seconds since the epoch
    python: str
    platform: str
    gpu: tuple[tuple[int, int] | None, str | None, tuple[int, int] | None] | None  # min cap, min driver, max cap

    @property
    def build_id(self) -> str:
        return f"{self.version}-{self.variant}"


@dataclass(frozen=True)
class ModuleSpec:
    record: ModuleRecord
    bundle_sha256: str
    signers: tuple[str, ...]
    cutoff: str
    env: tuple[tuple[str, str], ...]  # every runtime setting the environment applies, as it applies them


def file_name(build_id: str, fmt: Format) -> str:
    return f"{build_id}.lua" if fmt == "lua" else build_id


def build_of(name: str, fmt: Format) -> str | None:
    """The VERSION-VARIANT a module file's name stands for (None: not a build's file in this format)."""
    if name.startswith(".") or name == LUA_DEFAULT:
        return None
    if fmt == "lua":
        return name.removesuffix(".lua") if name.endswith(".lua") and len(name) > 4 else None
    return None if name.endswith(".lua") else name


def _record_line(r: ModuleRecord) -> str:
    data = {
        "engine": r.engine,
        "version": r.version,
        "variant": r.variant,
        "prefix": r.prefix,
        "kind": r.kind,
        "serial": r.serial,
        "built": r.built,
        "python": r.python,
        "platform": r.platform,
        "gpu": None if r.gpu is None else [list(r.gpu[0] or []) or None, r.gpu[1], list(r.gpu[2] or []) or None],
    }
    return RECORD_TAG + base64.b64encode(json.dumps(data, sort_keys=True).encode()).decode("ascii")


def _help_lines(spec: ModuleSpec) -> list[str]:
    r = spec.record
    return [
        f"{r.engine} {r.version} ({r.variant}), installed by lockbuild from a signed bundle.",
        f"Installed at: {r.prefix}",
        f"Bundle sha256: {spec.bundle_sha256}",
        f"Signers: {', '.join(spec.signers) or 'none'}",
        f"Cut-off: {spec.cutoff}",
        *(f"Sets {k}={v}" for k, v in spec.env),
    ]


def _whatis(spec: ModuleSpec) -> list[str]:
    r = spec.record
    return [
        f"Name: {r.engine}",
        f"Version: {r.version}",
        f"Variant: {r.variant}",
        f"Bundle sha256: {spec.bundle_sha256}",
        f"Signers: {', '.join(spec.signers) or 'none'}",
        f"Cut-off: {spec.cutoff}",
        f"Installed at: {r.prefix}",
    ]


def render(spec: ModuleSpec, fmt: Format) -> str:
    """The module file: whatis and help, ``PATH``, every runtime setting with ``pushenv`` (restored on
    unload), and one version of the engine at a time (Lmod swaps a same-name module; Tcl: ``conflict``)."""
    r = spec.record
    for name, _ in spec.env:
        if not _NAME.fullmatch(name):
            raise _unquotable(name, "it is not a variable name")
    bin_dir = r.prefix.rstrip("/") + "/bin"
    note = "Written by lockbuild with the install; `lockbuild remove` deletes it. Do not edit."
    if fmt == "lua":
        q = lua_string
        lines = [f"-- {_record_line(r)}", f"-- {note}"]
        lines += [f"whatis({q(w)})" for w in _whatis(spec)]
        lines.append(f"help({q(chr(10).join(_help_lines(spec)) + chr(10))})")
        lines.append(f"prepend_path({q('PATH')}, {q(bin_dir)})")
        lines += [f"pushenv({q(k)}, {q(v)})" for k, v in spec.env]
    else:
        q = tcl_string
        lines = [TCL_HEADER, f"# {_record_line(r)}", f"# {note}", "proc ModulesHelp {} {"]
        lines += [f"    puts stderr {q(h)}" for h in _help_lines(spec)]
        lines.append("}")
        lines += [f"module-whatis {q(w)}" for w in _whatis(spec)]
        lines.append(f"conflict {q(r.engine)}")
        lines.append(f"prepend-path PATH {q(bin_dir)}")
        lines += [f"pushenv {q(k)} {q(v)}" for k, v in spec.env]
    return "\n".join(lines) + "\n"


def default_text(build_id: str) -> str:
    """Environment Modules' ``.version``: the default's name."""
    return f"{TCL_HEADER}\nset ModulesVersion {tcl_string(build_id)}\n"


def read_record(text: str) -> ModuleRecord | None:
    """The record a file written by :func:`render` carries in its first lines (None: not one of ours)."""
    for line in text.splitlines()[:3]:
        body = line.removeprefix("#").removeprefix("--").strip()
        if not body.startswith(RECORD_TAG):
            continue
        try:
            raw = base64.b64decode(body.removeprefix(RECORD_TAG), validate=True)
            d = loads_json(raw, what="a module file's record", max_bytes=64 * 1024, error=InstallError)
            gpu = d["gpu"]
            return ModuleRecord(
                engine=str(d["engine"]),
                version=str(d["version"]),
                variant=str(d["variant"]),
                prefix=str(d["prefix"]),
                kind="image" if d["kind"] == "image" else "install",
                serial=int(d["serial"]),
                built=int(d["built"]),
                python=str(d["python"]),
                platform=str(d["platform"]),
                gpu=None if gpu is None else (_cap(gpu[0]), None if gpu[1] is None else str(gpu[1]), _cap(gpu[2])),
            )
        except (binascii.Error, InstallError, KeyError, TypeError, ValueError, IndexError):
            return None
    return None


def _cap(x: object) -> tuple[int, int] | None:
    if x is None:
        return None
    if isinstance(x, list) and len(x) == 2 and all(isinstance(n, int) for n in x):
        return (x[0], x[1])
    raise ValueError("a capability")


def spec_of(
    m: Manifest, sha256: str, signers: tuple[str, ...], prefix: str, kind: Literal["install", "image"]
) -> ModuleSpec:
    """The module file of ``m`` (its runtime settings as the environment applies them: ``--models`` included)
    installed at ``prefix``."""
    gpu = m.install.gpu
    return ModuleSpec(
        ModuleRecord(
            engine=m.engine,
            version=m.version,
            variant=m.variant,
            prefix=prefix,
            kind=kind,
            serial=m.serial,
            built=int(m.as_of.timestamp()),
            python=m.python,
            platform=m.platform,
            gpu=None if gpu is None else (gpu.min_capability, gpu.min_driver, gpu.max_capability),
        ),
        bundle_sha256=sha256,
        signers=signers,
        cutoff=iso(m.as_of),
        env=m.install.env,
    )
