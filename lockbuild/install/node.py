"""Facts about the node: architecture, C library, NVIDIA driver and GPUs, free space.

The driver and GPUs are stated (``LOCKBUILD_GPU_FACTS=FILE``) or detected (:func:`detect`); where neither
is possible they are unknown."""

from __future__ import annotations

import os
import platform
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lockbuild.documents import loads_json
from lockbuild.errors import LockbuildError
from lockbuild.fsio import bounded_read, open_regular, read_regular
from lockbuild.gpu.vocab import Capability, driver_in, is_driver, parse_capability
from lockbuild.limits import DEFAULT_LIMITS, Limits, MiB
from lockbuild.proc.child import run_bounded

PROC_DRIVER = Path("/proc/driver/nvidia/version")
SYS_DRIVER = Path("/sys/module/nvidia/version")
FACTS_ENV = "LOCKBUILD_GPU_FACTS"
MAX_FACTS = 64 << 10
MAX_GPUS = 64


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: Capability


@dataclass(frozen=True)
class Node:
    machine: str
    libc: str
    libc_version: tuple[int, int] | None
    driver: str | None
    gpus: tuple[Gpu, ...]
    stated: str | None = None  # the LOCKBUILD_GPU_FACTS file the driver and GPUs were taken from, if any

    @property
    def has_nvidia(self) -> bool:
        return self.driver is not None


def _small_text(path: Path) -> str | None:
    """A /proc or /sys file (their sizes read as 0 or 4096): at most 4 KiB, or None when unreadable."""
    try:
        f, _ = open_regular(path, what="driver version file", max_size=MiB)
        with f:
            return bounded_read(f, 4096, what=str(path)).decode("utf-8", "replace")
    except (OSError, LockbuildError):
        return None


def _driver_from_sys(path: Path) -> str | None:
    text = _small_text(path)
    if text is None:
        return None
    found = driver_in(text, r"\A\s*", r"\s*\Z")
    return found or "unknown"


def _driver_from_proc(path: Path) -> str | None:
    text = _small_text(path)
    if text is None:
        return None
    return driver_in(text, r"Kernel Module(?: for [^\s]+)?\s+") or "unknown"


class FactsError(LockbuildError):
    """The node's GPU facts are not stated plainly: by the LOCKBUILD_GPU_FACTS file, or by nvidia-smi."""

    default_tip = "Fix the file LOCKBUILD_GPU_FACTS names (JSON: driver and gpus), or unset it to detect them."


def stated_facts(path: Path) -> tuple[str | None, tuple[Gpu, ...]]:
    """The driver and GPUs an operator states in ``path``, strictly: JSON such as ``{"driver": "580.65.06",
    "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}]}``, for a node prepared before its
    GPUs or driver are in."""
    tip = (
        f'Write {path} as {{"driver": "580.65.06", "gpus": [{{"name": "NVIDIA A100-SXM4-80GB", "capability": '
        f'"8.0"}}]}} ("driver": null and "gpus": [] for a node without a GPU), or unset {FACTS_ENV}.'
    )
    try:
        raw = read_regular(path, what=f"{FACTS_ENV} file", max_size=MAX_FACTS, error=FactsError)
    except FileNotFoundError:
        raise FactsError(
            f"{FACTS_ENV} names {path}; expected a JSON file of the node's GPU facts, found none.", tip=tip
        ) from None
    data = loads_json(raw, what=f"the {FACTS_ENV} file {path}", max_bytes=MAX_FACTS, error=FactsError)
    if not isinstance(data, dict) or set(data) - {"driver", "gpus"}:
        raise FactsError(f"the {FACTS_ENV} file {path} is not an object of driver and gpus only.", tip=tip)
    driver, gpus = data.get("driver"), data.get("gpus", [])
    if driver is not None and not is_driver(driver):
        raise FactsError(
            f'the {FACTS_ENV} file\'s driver {str(driver)[:40]!r} is not a driver version like "580.65.06".', tip=tip
        )
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        raise FactsError(f"the {FACTS_ENV} file's gpus is not a list of at most {MAX_GPUS}.", tip=tip)
    out = []
    for i, g in enumerate(gpus):
        name, cap = (g.get("name"), g.get("capability")) if isinstance(g, dict) else (None, None)
        capability = parse_capability(cap)
        if (
            not isinstance(g, dict)
            or set(g) - {"name", "capability"}
            or not isinstance(name, str)
            or not 0 < len(name) <= 128
            or not name.isprintable()
            or capability is None
        ):
            raise FactsError(
                f'the {FACTS_ENV} file\'s gpus[{i}] is not {{"name": TEXT, "capability": "X.Y"}}.', tip=tip
            )
        out.append(Gpu(name, capability))
    if out and driver is None:
        raise FactsError(f"the {FACTS_ENV} file lists GPUs but no driver; state the driver the node will run.", tip=tip)
    return driver, tuple(out)


SMI_QUERY = ("--query-gpu=driver_version,compute_cap,name", "--format=csv,noheader")
SMI_TIMEOUT = 30
SMI_TIP = (
    f"Check the driver with `nvidia-smi`; on a node whose nvidia-smi cannot be fixed, state the facts in a "
    f"file named by {FACTS_ENV} (see `lockbuild doctor`)."
)


def _nvidia_smi(limits: Limits = DEFAULT_LIMITS) -> tuple[str | None, tuple[Gpu, ...]]:
    """The driver and GPUs nvidia-smi reports: its output read bounded (killed past the bound), decoded with
    replacement, and held to the rules stated facts are (a line that breaks them is refused, never skipped:
    a GPU left out would be one no rule checks)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, ()
    try:
        proc = run_bounded([exe, *SMI_QUERY], limit=limits.max_gpu_query, timeout=SMI_TIMEOUT)
    except OSError:
        return None, ()
    if proc.over:
        raise FactsError(
            f"{exe} printed over {limits.max_gpu_query} bytes for the GPU query (it was stopped); "
            f"expected a line per GPU, at most {MAX_GPUS}.",
            tip=SMI_TIP,
        )
    if proc.returncode != 0:
        return None, ()
    return parse_gpu_query(proc.stdout.decode("utf-8", "replace"), exe)


def parse_gpu_query(text: str, exe: str = "nvidia-smi") -> tuple[str | None, tuple[Gpu, ...]]:
    """``DRIVER, X.Y, NAME`` lines (nvidia-smi's CSV), each held to the rules of stated facts. Pure."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_GPUS:
        raise FactsError(f"{exe} lists {len(lines)} GPUs; expected at most {MAX_GPUS}.", tip=SMI_TIP)
    driver = None
    gpus: list[Gpu] = []
    for line in lines:
        parts = [p.strip() for p in line.split(",", 2)]
        capability = parse_capability(parts[1]) if len(parts) == 3 else None
        if (
            capability is None
            or not is_driver(parts[0])
            or not 0 < len(parts[2]) <= 128
            or not parts[2].isprintable()
            or driver not in (None, parts[0])
        ):
            raise FactsError(
                f"{exe} printed {line[:100]!r} for a GPU; expected DRIVER, X.Y, NAME (one driver "
                "version like 580.65.06 on every line, a compute capability like 8.0, a printable "
                "name of at most 128 characters).",
                tip=SMI_TIP,
            )
        driver = parts[0]
        gpus.append(Gpu(parts[2], capability))
    return driver, tuple(gpus)


def detect(
    proc_driver: Path = PROC_DRIVER, sys_driver: Path = SYS_DRIVER, environ: Mapping[str, str] | None = None
) -> Node:
    """The node's facts. ``environ``: the CLI's environment (the library reads none), where
    ``LOCKBUILD_GPU_FACTS`` may name a statement of the GPU facts.

    The driver and GPUs come, in this order, from that statement (every output marks such facts as stated),
    else ``nvidia-smi --query-gpu=driver_version,compute_cap,name``, else the driver version alone from
    ``/sys/module/nvidia/version``, then ``/proc/driver/nvidia/version``; then the GPUs are unknown."""
    libc, version = platform.libc_ver()
    parsed: tuple[int, int] | None = None
    m = re.fullmatch(r"(\d+)\.(\d+).*", version or "")
    if m:
        parsed = (int(m[1]), int(m[2]))
    stated = (environ or {}).get(FACTS_ENV) or None
    if stated is not None:
        driver, gpus = stated_facts(Path(stated))
    else:
        driver, gpus = _nvidia_smi()
        if driver is None:
            driver = _driver_from_sys(sys_driver) or _driver_from_proc(proc_driver)
    return Node(platform.machine(), "glibc" if libc == "glibc" else (libc or "unknown"), parsed, driver, gpus, stated)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
