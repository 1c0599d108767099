"""The node a build is for: its Python version, platform, and wheel-tag priority."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

ARCHES = ("x86_64", "aarch64")
# The glibc versions uv 0.13's --python-platform accepts as ARCH-manylinux_2_N.
GLIBC_MINORS = (17, 28, *range(31, 41))
_FORMS = (
    "ARCH-manylinux_2_N with N 17, 28 or 31 to 40 (e.g. x86_64-manylinux_2_28), ARCH-manylinux2014, "
    "ARCH-unknown-linux-gnu or ARCH-unknown-linux-musl, with ARCH x86_64 or aarch64"
)


@dataclass(frozen=True)
class Platform:
    """A Linux platform: architecture, C library, and the newest C library version it guarantees."""

    arch: str
    libc: str  # "glibc" or "musl"
    libc_version: tuple[int, int]

    def platform_tags(self) -> list[str]:
        major, newest = self.libc_version
        if self.libc == "musl":
            return [f"musllinux_{major}_{m}_{self.arch}" for m in range(newest, -1, -1)]
        out: list[str] = []
        oldest = 5 if self.arch == "x86_64" else 17
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        for minor in range(newest, oldest - 1, -1):
            out.append(f"manylinux_2_{minor}_{self.arch}")
            if minor in legacy:
                out.append(f"{legacy[minor]}_{self.arch}")
        return out


def parse_platform(text: str) -> Platform:
    """Read a Linux platform in uv's ``--python-platform`` spelling; ValueError names the accepted forms.

    ``unknown-linux-gnu`` is manylinux_2_28 and ``unknown-linux-musl`` musllinux_1_2, as uv reads them.
    """
    shown = text if len(text) <= 80 else text[:77] + "..."
    m = re.fullmatch(r"(x86_64|aarch64)-(.+)", text)
    if m is None:
        raise ValueError(f"expected a platform of the form {_FORMS}; found {shown!r}")
    arch, rest = m[1], m[2]
    if rest == "manylinux2014":
        return Platform(arch, "glibc", (2, 17))
    if rest == "unknown-linux-gnu":
        return Platform(arch, "glibc", (2, 28))
    if rest == "unknown-linux-musl":
        return Platform(arch, "musl", (1, 2))
    mm = re.fullmatch(r"manylinux_2_(\d{1,2})", rest)
    if mm and int(mm[1]) in GLIBC_MINORS:
        return Platform(arch, "glibc", (2, int(mm[1])))
    raise ValueError(f"expected a platform of the form {_FORMS}; found {shown!r}")


@dataclass(frozen=True)
class Target:
    """The node's Python ("3.12") and platform (as uv spells it), with its tag priority."""

    python: str
    platform: str
    parsed: Platform = field(compare=False)

    @classmethod
    def of(cls, python: str, platform: str) -> Target:
        return cls(python, platform, parse_platform(platform))

    @property
    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")
        return int(major), int(minor)

    @cached_property
    def _priority(self) -> dict[tags.Tag, int]:
        version = self.python_tuple
        interp = f"cp{version[0]}{version[1]}"
        platforms = self.parsed.platform_tags()
        ordered = [
            *tags.cpython_tags(version, abis=[interp], platforms=platforms),
            *tags.compatible_tags(version, interpreter=interp, platforms=platforms),
        ]
        prio: dict[tags.Tag, int] = {}
        for i, tag in enumerate(ordered):
            prio.setdefault(tag, i)
        return prio

    def wheel_rank(self, filename: str) -> int | None:
        """Lower is better; None when the wheel cannot be installed on this target."""
        try:
            _, _, _, wheel_tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        ranks = [self._priority[t] for t in wheel_tags if t in self._priority]
        return min(ranks) if ranks else None

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker values for this target, for evaluating a lock's markers."""
        major, minor = self.python_tuple
        return {
            "implementation_name": "cpython",
            "implementation_version": f"{major}.{minor}.0",
            "os_name": "posix",
            "platform_machine": self.parsed.arch,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": f"{major}.{minor}.0",
            "python_version": f"{major}.{minor}",
            "sys_platform": "linux",
        }
