"""The self-test sandbox's own seccomp filter: no process in it may install a filter with a listener.

A user-notification filter outranks strace's ``SECCOMP_RET_TRACE``, so an engine could let a call run
unseen; bubblewrap installs this classic BPF program (``--seccomp FD``), which makes such a ``seccomp`` call
fail with ``EPERM`` under every ABI of the machine. Any other filter is the tracer's business."""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each, low word first
# on the little-endian machines below)
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24
_LD_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
SET_MODE_FILTER = 1
FLAG_NEW_LISTENER = 1 << 3
X32_BIT = 0x40000000

# (AUDIT_ARCH_*, the numbers of seccomp under that ABI), by the machine that runs them
ABIS: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {
    "x86_64": ((0xC000003E, (317, X32_BIT | 317)), (0x40000003, (354,))),
    "aarch64": ((0xC00000B7, (277,)), (0x40000028, (383,))),
}


@dataclass(frozen=True)
class _Ins:
    code: int
    k: int
    jt: str | None = None  # labels, resolved to offsets by _assemble
    jf: str | None = None


def _assemble(prog: list[_Ins | str]) -> bytes:
    """Labels (strings) to relative jumps; the instructions as ``struct sock_filter`` bytes."""
    at: dict[str, int] = {}
    ins: list[_Ins] = []
    for p in prog:
        if isinstance(p, str):
            at[p] = len(ins)
        else:
            ins.append(p)
    out = b""
    for i, p in enumerate(ins):
        jt = at[p.jt] - i - 1 if p.jt else 0
        jf = at[p.jf] - i - 1 if p.jf else 0
        out += struct.pack("=HBBI", p.code, jt, jf, p.k)
    return out


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one), or None where its system-call numbers are not known
    here (the tracer's rule on ``seccomp`` and ``prctl`` still fails any filter that gets installed)."""
    abis = ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    prog: list[_Ins | str] = [_Ins(_LD_ABS, _ARCH)]
    prog += [_Ins(_JEQ, arch, jt=f"abi{i}") for i, (arch, _) in enumerate(abis)]
    prog.append(_Ins(_RET, RET_ALLOW))  # an ABI this machine does not run
    for i, (_, numbers) in enumerate(abis):
        prog += [f"abi{i}", _Ins(_LD_ABS, _NR)]
        prog += [_Ins(_JEQ, nr, jt="seccomp") for nr in numbers]
        prog.append(_Ins(_RET, RET_ALLOW))
    prog += [
        "seccomp",
        _Ins(_LD_ABS, _ARG0),
        _Ins(_JEQ, SET_MODE_FILTER, jf="allow"),
        _Ins(_LD_ABS, _ARG1),
        _Ins(_JSET, FLAG_NEW_LISTENER, jt="refuse"),
        "allow",
        _Ins(_RET, RET_ALLOW),
        "refuse",
        _Ins(_RET, RET_ERRNO | errno.EPERM),
    ]
    return _assemble(prog)
