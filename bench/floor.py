"""The stock-pipeline floor of a cold build, and the sha256 pass against OpenSSL's, in the same run.

A cold ``lockbuild build`` (resolve, download, verify, pack, sign) is timed beside what the same work costs
with stock tools on the same files, each a process of its own, back to back:

    uv pip compile (cold uv cache)  ->  curl --parallel of every file  ->  sha256sum -c of each
    ->  tar cf - | zstd -T0 -3  ->  minisign -S of the result

The floor's wall time and CPU time (user + system, from ``wait4``'s rusage) are the sums of its steps'.
Two ratios come out: the cold build against that floor, and against the raw download alone (curl), each
in wall time and in CPU seconds. The sha256 pass (``verify-pass``): ``digest_signed_file`` without the prehash
(the node's signature pass, timed in-process by ``bench.steps digest``) against ``openssl dgst -sha256``
of the same bundle.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.measure import Figure, Ratio, StepFailed, pairwise, run
from lockbuild.proc.uvtool import uv_binary

if TYPE_CHECKING:
    from bench.suite import Suite

LOCKBUILD = [sys.executable, "-m", "bench.lbrun"]  # as bench.suite runs the CLI
PHASE = "floor"
BUILD = "lockbuild build (cold cache)"
STOCK = "stock pipeline (sum of the five)"
CURL = "floor: curl --parallel of every file"
PASS = "verify-pass"
LB_PASS = "lockbuild sha256 pass (digest_signed_file, in-process)"
OPENSSL = "openssl dgst -sha256"
STEPS = (
    "floor: uv pip compile",
    CURL,
    "floor: sha256sum -c of each",
    "floor: tar cf - | zstd -T0 -3",
    "floor: minisign -S",
)


def minisign_key(work: Path) -> Path:
    """A password-less minisign secret key for the floor's signature (made once per run)."""
    secret = work / "floor-minisign.key"
    if not secret.exists():
        run(["minisign", "-G", "-W", "-f", "-p", str(work / "floor-minisign.pub"), "-s", str(secret)])
    return secret


def phase_floor(s: Suite) -> None:
    if shutil.which("minisign") is None:
        s.log("floor: minisign is not installed; the stock-pipeline floor is skipped")
        return
    _, files_json, _, _, total = s._inputs()
    files = json.loads(files_json.read_text())
    sums = "".join(f"{p['sha256']}  {p['file']}\n" for p in s.lock_doc["packages"])
    sums += "".join(
        f"{e['sha256']}  {e['path'].rsplit('/', 1)[-1]}\n"
        for e in s.lock_doc["extras"]
        if any(f["name"] == e["path"].rsplit("/", 1)[-1] for f in files)
    )
    key = minisign_key(s.s.work)
    doc = s.lock_doc
    for i in range(s.s.repeat):
        cache, out = s.rep_dir(i, "cache"), s.rep_dir(i, "dist")
        build = s.timed(
            PHASE,
            BUILD,
            s.run(
                [*LOCKBUILD, "build", str(s.s.recipe), "--key", str(s.s.secret), "--out", str(out), "--json"],
                env=s.lb_env(cache),
            ),
            size=total,
        )
        dl, tar = s.rep_dir(i, "floor-files"), s.rep_dir(i, "floor-tar")
        dl.mkdir()
        tar.mkdir()
        cfg = dl.parent / "floor-curl.cfg"
        cfg.write_text("".join(f'url = "{f["url"]}"\noutput = "{dl / f["name"]}"\n' for f in files))
        (dl.parent / "floor-SHA256SUMS").write_text(sums)
        compile_argv = [
            uv_binary(),
            "pip",
            "compile",
            "-",
            "--python-version",
            doc["python"],
            "--python-platform",
            doc["platform"],
            "--exclude-newer",
            doc["as_of"],
            "--index-url",
            s.s.index_url,
            "--generate-hashes",
            "--no-header",
            "--quiet",
            "--output-file",
            str(dl.parent / "floor-requirements.txt"),
        ]
        steps = [
            s.run(compile_argv, env=s.uv_env(s.rep_dir(i, "floor-uv-cache")), stdin=s.s.requirement + "\n"),
            s.run(["curl", "--parallel", "--parallel-max", str(s.s.jobs), "--fail", "-sS", "-K", str(cfg)]),
            s.shell(f"cd {dl} && sha256sum -c --quiet ../floor-SHA256SUMS"),
            s.shell(f"tar cf - -C {dl} . | zstd -T0 -3 -q -o {tar / 'b.tar.zst'}"),
            s.run(["minisign", "-S", "-s", str(key), "-m", str(tar / "b.tar.zst")]),
        ]
        if sum(1 for p in dl.iterdir()) != len(files):
            raise StepFailed(f"curl left {sum(1 for _ in dl.iterdir())} files in {dl}; expected {len(files)}.")
        for name, r in zip(STEPS, steps, strict=True):
            s.timed(PHASE, name, r, size=total)
        wall = sum(r.seconds for r in steps)
        s.r.fig(PHASE, STOCK).add(
            wall,
            max(r.max_rss_kb for r in steps),
            sum(r.cpu_s for r in steps),
            sum(r.others_cpu_s for r in steps) / max(wall, 1e-9),
        )
        s.r.fig(PHASE, STOCK).bytes = total
        s.log(
            f"  floor run {i}: build {build.seconds:.2f} s ({build.cpu_s:.2f} CPU-s), stock pipeline "
            f"{wall:.2f} s ({sum(r.cpu_s for r in steps):.2f} CPU-s), curl alone {steps[1].seconds:.2f} s "
            f"({steps[1].cpu_s:.2f} CPU-s)"
        )
        s.clean_rep(i)


def phase_sha_pass(s: Suite) -> None:
    if s.bundle is None:
        return
    size = s.bundle.stat().st_size
    for _ in range(s.s.repeat):
        r = s.run(s.step("digest", s.bundle), env=s.env)
        s.timed(PASS, LB_PASS, r, seconds=json.loads(r.stdout)["seconds"], size=size)
        s.timed(PASS, OPENSSL, s.run(["openssl", "dgst", "-sha256", str(s.bundle)], env=s.env), size=size)


def _cpu_ratio(a: Figure, b: Figure) -> tuple[float, ...]:
    n = min(len(a.cpu_s), len(b.cpu_s))
    return tuple(a.cpu_s[i] / max(b.cpu_s[i], 1e-9) for i in range(n))


def ratios(figures: dict[tuple[str, str], Figure]) -> list[Ratio]:
    out: list[Ratio] = []
    build = figures.get((PHASE, BUILD))
    for floor, what in ((STOCK, "stock pipeline"), (CURL, "raw download (curl)")):
        f = figures.get((PHASE, floor))
        if build is None or f is None or not f.seconds:
            continue
        out.append(Ratio(f"cold build / {what}, wall", pairwise(build, f), "(none)", None))
        out.append(Ratio(f"cold build / {what}, CPU-s", _cpu_ratio(build, f), "(none)", None))
    lb, ossl = figures.get((PASS, LB_PASS)), figures.get((PASS, OPENSSL))
    if lb is not None and ossl is not None and lb.seconds:
        vals = pairwise(lb, ossl)
        out.append(
            Ratio("sha256 pass / openssl dgst -sha256, wall", vals, "<= 1.15", sorted(vals)[len(vals) // 2] <= 1.15)
        )
        out.append(Ratio("sha256 pass / openssl dgst -sha256, CPU-s", _cpu_ratio(lb, ossl), "(none)", None))
    return out
