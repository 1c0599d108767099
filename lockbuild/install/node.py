"""Facts about the node: architecture, C library, NVIDIA driver and GPUs, free space."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROC_DRIVER = Path("/proc/driver/nvidia/version")


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]


@dataclass(frozen=True)
class Node:
    machine: str
    libc: str
    libc_version: tuple[int, int] | None
    driver: str | None
    gpus: tuple[Gpu, ...]

    @property
    def has_nvidia(self) -> bool:
        return self.driver is not None


def _driver_from_proc(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for [^\s]+)?\s+(\d+(?:\.\d+)*)", text)
    return m[1] if m else "unknown"


def _nvidia_smi() -> tuple[str | None, tuple[Gpu, ...]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, ()
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=driver_version,compute_cap,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, ()
    if proc.returncode != 0:
        return None, ()
    driver = None
    gpus: list[Gpu] = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2:
            continue
        driver = parts[0]
        m = re.fullmatch(r"(\d+)\.(\d+)", parts[1])
        if m:
            gpus.append(Gpu(parts[2] if len(parts) > 2 else "GPU", (int(m[1]), int(m[2]))))
    return driver, tuple(gpus)


def detect(proc_driver: Path = PROC_DRIVER) -> Node:
    libc, version = platform.libc_ver()
    parsed: tuple[int, int] | None = None
    m = re.fullmatch(r"(\d+)\.(\d+).*", version or "")
    if m:
        parsed = (int(m[1]), int(m[2]))
    driver, gpus = _nvidia_smi()
    if driver is None:
        driver = _driver_from_proc(proc_driver)
    return Node(platform.machine(), "glibc" if libc == "glibc" else (libc or "unknown"), parsed, driver, gpus)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
