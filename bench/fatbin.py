"""The cost of reading fatbins while fetching: the reader over a synthetic CUDA wheel beside plain sha256
of the same wheel (what the fetch does to every file anyway).

    python -m bench.fatbin [--mb 200] [--repeat 3]

The wheel holds shared objects laid out as nvcc writes them (a code section, then a ``.nv_fatbin`` of many
containers and entries, the section table at the end), deflated like a PyPI wheel, half of each payload
incompressible. Prints MB/s (of the wheel's bytes) for both, and the reader's share of a fetch that
downloads at a given rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from lockbuild.gpu.archives import read_archive

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import fatbinkit

ARCHS = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")


def _payload(rng: random.Random, n: int) -> bytes:
    """Half random, half zeros, per 4 KiB: compresses about 2x, like cubins."""
    out = bytearray()
    while len(out) < n:
        out += rng.randbytes(2048) + bytes(2048)
    return bytes(out[:n])


def library(rng: random.Random, size: int) -> bytes:
    code = _payload(rng, size // 4)
    entries, left = [], size - len(code)
    while left > 0:
        n = min(left, rng.randint(256 << 10, 2 << 20))
        payload = fatbinkit.cubin(75)[:64] + _payload(rng, n)
        entries.append(fatbinkit.entry("sass", rng.choice(ARCHS), payload))
        left -= n
    containers = [fatbinkit.container(*entries[i : i + 8]) for i in range(0, len(entries), 8)]
    return fatbinkit.elf_so({".text": code, ".nv_fatbin": b"".join(containers)})


def wheel(path: Path, mb: int) -> None:
    rng = random.Random(46)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        left = mb << 20
        i = 0
        while left > 0:
            n = min(left, 48 << 20)
            zf.writestr(f"torch/lib/libkernels{i}.so", library(rng, n))
            zf.writestr(f"torch/pkg{i}.py", b"# python\n" * 1000)
            left -= n
            i += 1


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200, help="uncompressed size of the wheel's libraries")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "torch-0-cp312-cp312-manylinux_2_28_x86_64.whl"
        wheel(path, args.mb)
        size = path.stat().st_size

        def sha() -> None:
            h = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)

        def read() -> None:
            with path.open("rb") as f:
                reading = read_archive(f, path.name)
            assert reading is not None and reading.files

        t_sha, t_read = _best(sha, args.repeat), _best(read, args.repeat)
        with path.open("rb") as f:
            libs = len(read_archive(f, path.name).files)  # type: ignore[union-attr]
    result = {
        "wheel_mb": round(size / 1e6, 1),
        "libraries_mb": args.mb,
        "libraries": libs,
        "sha256_mb_s": round(size / 1e6 / t_sha, 1),
        "fatbin_read_mb_s": round(size / 1e6 / t_read, 1),
        "read_over_sha256": round(t_read / t_sha, 2),
        "cpus": os.cpu_count(),
    }
    for rate in (50, 100, 250):  # MB/s of download: the reader's time as a share of the transfer's
        result[f"share_of_fetch_at_{rate}_mb_s"] = round(t_read / (size / 1e6 / rate), 3)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
