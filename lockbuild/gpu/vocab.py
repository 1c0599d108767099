"""Compute capabilities, driver versions and CUDA releases: the one definition of each rule. Pure.

A capability is ``X.Y`` (``8.0``); an architecture a binary carries is a capability with an optional
suffix, ``a`` (arch-specific: runs on exactly X.Y) or ``f`` (family: runs on X.Z for Z >= Y); a driver
version is up to four dot-separated numbers (``580``, ``580.65.06``), compared number by number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CAPABILITY_PATTERN = r"(\d{1,2})\.(\d{1,2})"
DRIVER_PATTERN = r"\d{1,4}(?:\.\d{1,4}){0,3}"
_CAPABILITY = re.compile(CAPABILITY_PATTERN)
_ARCH = re.compile(CAPABILITY_PATTERN + r"([af]?)")
_DRIVER = re.compile(DRIVER_PATTERN)
_CUDA = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.\d{1,6}){0,2}")

Capability = tuple[int, int]


def parse_capability(text: object) -> Capability | None:
    """``"8.0"`` as ``(8, 0)``; None for anything that is not a capability."""
    m = _CAPABILITY.fullmatch(text) if isinstance(text, str) else None
    return (int(m[1]), int(m[2])) if m else None


def capability_text(cap: Capability) -> str:
    return f"{cap[0]}.{cap[1]}"


def is_driver(text: object) -> bool:
    """A driver version like ``580`` or ``580.65.06`` (at most four numbers of at most four digits)."""
    return isinstance(text, str) and _DRIVER.fullmatch(text) is not None


def driver_numbers(text: str) -> tuple[int, ...]:
    """A driver version's numbers, for comparison: ``580.65.06`` -> (580, 65, 6); () when it has none."""
    return tuple(int(x) for x in re.findall(r"\d+", text))


def driver_at_least(have: str, need: str) -> bool:
    """Whether driver ``have`` is ``need`` or newer (number by number: 580.65.06 >= 580 and < 580.82)."""
    return bool(driver_numbers(have)) and driver_numbers(have) >= driver_numbers(need)


def driver_in(text: str, before: str = "", after: str = "") -> str | None:
    """The first driver version in ``text`` between the regular expressions ``before`` and ``after``
    (``/proc/driver/nvidia/version``'s line, ``/sys/module/nvidia/version``); None when there is none."""
    m = re.search(before + "(" + DRIVER_PATTERN + ")" + after, text)
    return m[1] if m else None


@dataclass(frozen=True, order=True)
class Arch:
    """An architecture a binary has code for: ``9.0``, ``9.0a`` (arch-specific), ``10.0f`` (family)."""

    major: int
    minor: int
    suffix: str = ""  # "", "a" or "f"

    @property
    def capability(self) -> Capability:
        return (self.major, self.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    def runs_on(self, cap: Capability) -> bool:
        """SASS for this architecture runs on a GPU of capability ``cap``: plain and ``f`` code of the same
        major at or below it, ``a`` code on exactly its capability."""
        if self.suffix == "a":
            return cap == self.capability
        return cap[0] == self.major and cap[1] >= self.minor


def parse_arch(text: object) -> Arch | None:
    m = _ARCH.fullmatch(text) if isinstance(text, str) else None
    return Arch(int(m[1]), int(m[2]), m[3]) if m else None


def arch_of_sm(sm: int, suffix: str = "") -> Arch:
    """The architecture of an ``sm_NN`` number (``90`` -> 9.0, ``103`` -> 10.3, ``120`` -> 12.0)."""
    return Arch(sm // 10, sm % 10, suffix)


_FAMILIES = ((5, "Maxwell"), (6, "Pascal"), (7, "Volta"), (8, "Ampere"), (9, "Hopper"), (10, "Blackwell"))
_NAMED = {(7, 5): "Turing", (8, 9): "Ada Lovelace", (11, 0): "Blackwell", (12, 0): "Blackwell", (12, 1): "Blackwell"}


def architecture_name(cap: Capability) -> str:
    """NVIDIA's name for a capability's architecture (``8.9`` -> Ada Lovelace), or ``sm_NN``."""
    if cap in _NAMED:
        return _NAMED[cap]
    return next((name for major, name in _FAMILIES if major == cap[0]), f"sm_{cap[0]}{cap[1]}")


# Compute capabilities NVIDIA has shipped (the sm_arch values of the wheel-variant provider).
KNOWN_CAPABILITIES: tuple[Capability, ...] = (
    (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7),
    (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1),
)  # fmt: skip

# Each CUDA release's minimum Linux x86_64 driver: NVIDIA's CUDA Toolkit Release Notes, table 3 "CUDA
# Toolkit and Corresponding Driver Versions" (the GA row of each release), at
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html and, per release, under
# https://docs.nvidia.com/cuda/archive/X.Y.Z/cuda-toolkit-release-notes/. Oldest first.
CUDA_DRIVERS: tuple[tuple[str, str], ...] = (
    ("12.0", "525.60.13"),
    ("12.1", "530.30.02"),
    ("12.2", "535.54.03"),
    ("12.3", "545.23.06"),
    ("12.4", "550.54.14"),
    ("12.5", "555.42.02"),
    ("12.6", "560.28.03"),
    ("12.8", "570.26"),
    ("12.9", "575.51.03"),
    ("13.0", "580.65.06"),
)


def cuda_release(version: str) -> str | None:
    """``13.0.96`` (a runtime's version) as its release ``13.0``; None when it is not a version."""
    m = _CUDA.fullmatch(version)
    return f"{int(m[1])}.{int(m[2])}" if m else None


def min_driver_for(cuda: str) -> str | None:
    """The minimum Linux driver of CUDA release ``cuda`` (``13.0`` -> ``580.65.06``); None off the table."""
    return next((driver for release, driver in CUDA_DRIVERS if release == cuda), None)


def newest_cuda_for(driver: str) -> str | None:
    """The newest CUDA release whose driver branch is at or below ``driver``'s branch (580 -> 13.0)."""
    branch = driver_numbers(driver)[:1]
    found = [release for release, floor in CUDA_DRIVERS if driver_numbers(floor)[:1] <= branch]
    return found[-1] if found and branch else None
