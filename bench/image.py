"""The image's figures for one bundle (the vLLM one): `lockbuild image` against `install` plus a bare
`mksquashfs` of the same tree; the image's size against the bundle's; and cold `import MODULE` wall time
and the files the import opens (strace), from a squashfuse mount against the same tree on disk.

    .venv/bin/python -m bench.image BUNDLE --trust DIR --module vllm [--repeat 3] [--json FILE]

Cold means the page cache dropped before each import (as root: /proc/sys/vm/drop_caches; otherwise the
figures are warm and the report says so). Needs bwrap, squashfs-tools, squashfuse, strace and about three
times the unpacked size of free disk under --work (default bench/work/image).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

PREFIX = Path("/opt/lockbuild-bench/engine")
LOCKBUILD = [sys.executable, "-m", "lockbuild"]


def timed(argv: list[str], **kw: object) -> float:
    t = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    return time.monotonic() - t


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def drop_caches() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def in_mount(image: Path, command: str) -> list[str]:
    """``command`` in a mount namespace with ``image`` squashfuse-mounted at PREFIX (as the tests mount it)."""
    from lockbuild.image import view

    empty = Path(os.environ.get("TMPDIR", "/tmp")) / "lockbuild-bench-mountpoint"
    empty.mkdir(exist_ok=True)
    script = (
        f"squashfuse -f {image} {PREFIX} & pid=$!\n"
        f"for i in $(seq 200); do [ -e {PREFIX}/bin ] && break; sleep 0.05; done\n"
        f"{command}\nrc=$?; kill $pid; exit $rc\n"
    )
    return [
        "bwrap",
        "--unshare-user",
        "--unshare-pid",
        "--die-with-parent",
        "--cap-add",
        "ALL",
        *view.mounts(empty, PREFIX),
        "--",
        "sh",
        "-c",
        script,
    ]


def import_figures(python: str, module: str, wrap: object, work: Path) -> dict[str, float | int]:
    """Cold wall time of ``python -c 'import module'``, and the files it opens (openat calls that succeed)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    log = work / "strace.log"

    def cmd(inner: str) -> list[str]:
        return wrap(inner) if callable(wrap) else ["sh", "-c", inner]

    drop_caches()
    out = subprocess.run(cmd(f"{python} -c '{code}'"), check=True, capture_output=True, text=True).stdout
    seconds = float(out.strip().splitlines()[-1])
    drop_caches()
    subprocess.run(
        cmd(f"strace -f -qq -e trace=open,openat -o {log} {python} -c 'import {module}'"),
        check=True,
        capture_output=True,
    )
    lines = log.read_text().splitlines()
    opened = sum(1 for line in lines if "open" in line and "= -1" not in line)
    return {"import_seconds": round(seconds, 3), "files_opened": opened}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--trust", type=Path, required=True)
    ap.add_argument("--module", default="vllm")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("bench/work/image"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = a.work.absolute()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    runs: dict[str, list[float]] = {"install": [], "bare_mksquashfs": [], "image": []}
    cold = drop_caches()
    for i in range(a.repeat):
        root, out = work / f"root{i}", work / f"img{i}" / "engine.sqfs"
        out.parent.mkdir()
        runs["install"].append(
            timed(
                [
                    *LOCKBUILD,
                    "install",
                    str(a.bundle),
                    "--root",
                    str(root),
                    "--trust",
                    str(a.trust),
                    "--gpu-check",
                    "skip",
                ]
            )
        )
        (env,) = [p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith(".")]
        runs["bare_mksquashfs"].append(
            timed(
                [
                    "mksquashfs",
                    str(env),
                    str(work / f"bare{i}.sqfs"),
                    "-noappend",
                    "-no-progress",
                    "-quiet",
                    "-comp",
                    "zstd",
                    "-b",
                    "1M",
                ]
            )
        )
        runs["image"].append(
            timed(
                [
                    *LOCKBUILD,
                    "image",
                    str(a.bundle),
                    "--trust",
                    str(a.trust),
                    "--prefix",
                    str(PREFIX),
                    "--out",
                    str(out),
                    "--gpu-check",
                    "skip",
                ]
            )
        )
    env_python = str(env / "bin" / "python")
    image = work / "img0" / "engine.sqfs"
    report = {
        "bundle": str(a.bundle),
        "module": a.module,
        "cold": cold,
        "seconds": {
            k: {"median": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]} for k, v in runs.items()
        },
        "bytes": {
            "bundle": a.bundle.stat().st_size,
            "image": image.stat().st_size,
            "bare_mksquashfs": (work / "bare0.sqfs").stat().st_size,
        },
        "same_bytes_every_run": len({sha256(work / f"img{i}" / "engine.sqfs") for i in range(a.repeat)}) == 1,
        "import_on_disk": import_figures(env_python, a.module, None, work),
        "import_from_squashfuse": import_figures(
            str(PREFIX / "bin" / "python"), a.module, lambda inner: in_mount(image, inner), work
        ),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    with contextlib.suppress(OSError):
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
