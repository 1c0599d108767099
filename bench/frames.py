"""The node's read of a framed bundle against one ``openssl dgst -sha256`` pass, in the same run.

    python -m bench.frames [--size-mb 1024] [--repeat 3] [--out DIR]

A synthetic bundle (wheel-like members: 85 % incompressible bytes, 15 % text) is written twice, framed
(every bundle this lockbuild makes) and in the single-frame layout made before frames, and signed with a
fresh key. Then, each round back to back on the warm page cache: ``openssl dgst -sha256`` of the framed
file, ``lockbuild verify`` (signature + every frame against the signed table), ``verify --members``
(and every member decompressed and hashed), ``verify`` of the old layout (today's: the whole file hashed,
then every member), each on every core and under ``taskset -c 0`` (one thread), and ``lockbuild --version``
(the interpreter's start and imports, part of every lockbuild figure). Ratios are taken round by round
against that round's openssl pass; medians are printed as a Markdown table."""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the test suite's manifest helpers

from hostile import RECIPE, UV_MEMBER, manifest, member

from lockbuild.bundle.write import Entry, write_bundle
from lockbuild.minisign import read_secret_key, write_keypair
from lockbuild.trust import Statement, digest_signed_file, sign_statement, signature_path

LB = [sys.executable, "-m", "lockbuild"]


def members(size: int) -> list[tuple[str, bytes]]:
    rng = random.Random(50)
    text = b"def f(x):\n    return x + 1\n" * 4096
    out = []
    left, i = size, 0
    while left > 0:
        n = min(left, rng.choice((1, 4, 16, 64)) << 20)
        cut = n * 85 // 100
        out.append(
            (f"wheels/pkg{i:03d}-1.0-py3-none-any.whl", rng.randbytes(cut) + (text * (n // len(text) + 1))[: n - cut])
        )
        left -= n
        i += 1
    return out


def make(work: Path, size: int) -> tuple[Path, Path, Path]:
    """The framed bundle, the old-layout one (same members), and the trust directory."""
    files = members(size)
    listed = [member("recipe.toml", RECIPE, "recipe"), *(member(p, d, "wheel") for p, d in files)]
    listed.append(member(UV_MEMBER, b"uv", "tool"))
    m = manifest(listed)
    datas = [RECIPE, *(d for _, d in files), b"uv"]
    keys = work / "keys"
    keys.mkdir(parents=True)
    write_keypair(keys / "k", password=None)
    key = read_secret_key(keys / "k.key", lambda: "")
    trust = work / "trust"
    trust.mkdir()
    shutil.copyfile(keys / "k.pub", trust / "k.pub")
    made = []
    for name, framed in (("framed", True), ("old", False)):
        bundle = work / name / m.bundle_name
        bundle.parent.mkdir()
        out = io.BytesIO()
        write_bundle(out, m, [Entry(mm, d) for mm, d in zip(m.members, datas, strict=True)], framed=framed)
        bundle.write_bytes(out.getvalue())
        d = digest_signed_file(bundle)
        st = Statement.of(m, name=bundle.name, sha256=d.whole, size=d.size, expires=None, frames_sha256=d.frames_sha256)
        signature_path(bundle).write_text(sign_statement(key, st, d.prehash(bundle.name)))
        made.append(bundle)
    return made[0], made[1], trust


def timed(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, from wait4) and peak RSS in MB of one command (from
    ``/usr/bin/time -f %M``: a child's own ru_maxrss starts at this process's high-water mark)."""
    t = time.perf_counter()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{argv} failed: {err.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, int(err.split()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/work/frames"))
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    framed, old, trust = make(args.out, args.size_mb << 20)
    one = ["taskset", "-c", "0"]
    v = [*LB, "verify", "--trust", str(trust)]
    variants = {
        "openssl dgst -sha256 (framed file)": ["openssl", "dgst", "-sha256", str(framed)],
        "lockbuild verify (frames, all cores)": [*v, str(framed)],
        "lockbuild verify (frames, 1 thread)": [*one, *v, str(framed)],
        "lockbuild verify --members (all cores)": [*v, "--members", str(framed)],
        "lockbuild verify --members (1 thread)": [*one, *v, "--members", str(framed)],
        "lockbuild verify, layout before frames": [*v, str(old)],
        "lockbuild --version (start-up)": [*LB, "--version"],
    }
    for argv in variants.values():  # warm the page cache and the imports
        timed(argv)
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in variants}
    for _ in range(args.repeat):
        for k, argv in variants.items():
            runs[k].append(timed(argv))
    base = [w for w, _, _ in runs["openssl dgst -sha256 (framed file)"]]
    size = framed.stat().st_size
    print(
        f"{size / 1e6:.0f} MB framed bundle ({old.stat().st_size / 1e6:.0f} MB in the old layout), "
        f"{len(os.sched_getaffinity(0))} cores, medians of {args.repeat}\n"
    )
    print("| command | wall s | × openssl (range) | CPU s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|")
    for k, ts in runs.items():
        ratios = [w / b for (w, _, _), b in zip(ts, base, strict=True)]
        wall, cpu, rss = (statistics.median(x[i] for x in ts) for i in range(3))
        span = f"{min(ratios):.2f}–{max(ratios):.2f}"
        print(f"| {k} | {wall:.2f} | {statistics.median(ratios):.2f} ({span}) | {cpu:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
