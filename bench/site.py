"""Site-wing measurements, as ratios from one run, on vLLM-shaped synthetic bundles.

    .venv/bin/python -m bench.site [--scale 0.02] [--fanout 1,4,16]

Bundles have vLLM 0.11.0's file set (bench/shapes.py: 141 wheels, sizes scaled by --scale of 4.9 GB)
with incompressible contents, as real wheels nearly are. Two updates are modelled: a patch release
(only the engine wheel changes) and a minor release (the engine, torch, triton, xformers and 20 small
wheels change). Measured: bytes moved and time for the update as a full bundle, a delta, and a
registry pull of the missing blobs; fan-out to K stores pulling in parallel from one local registry
(CNCF distribution) against copying the .lbz K times; and a store's disk for 3 versions x 2 variants
against the sum of their bundles. Needs docker-registry (scripts/test installs it).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from registrykit import RealRegistry  # noqa: E402
from sitekit import make_bundle  # noqa: E402

from bench.shapes import VLLM_0_11_0  # noqa: E402
from lockbuild.minisign import write_keypair  # noqa: E402

MINOR = {"vllm", "torch", "triton", "xformers"}


def files(version: str, variant: str, scale: float, changed: set[str]) -> list[tuple[str, bytes, str]]:
    """A build's members; the CUDA wheels differ per variant, the ``changed`` projects (and for a minor
    release, 20 small wheels) per version."""
    out = [
        ("recipe.toml", f'[engine]\nname = "toyengine"\n# {version} {variant}\n'.encode(), "recipe"),
        ("lock/requirements.txt", f"vllm=={version}\n".encode(), "lock"),
        ("tools/uv-0.9.0-py3-none-any.whl", random.Random("uv").randbytes(4096), "tool"),
    ]
    small = sorted(p for p, _, s in VLLM_0_11_0 if s < 1_000_000)[:20]
    for project, ver, size in VLLM_0_11_0:
        cuda = project.startswith(("nvidia-", "torch", "triton", "xformers", "cupy"))
        moves = project in changed or (changed == MINOR and project in small)
        seed = f"{project}-{ver}-{variant if cuda else ''}-{version if moves else 'base'}"
        n = max(2048, int(size * scale))
        out.append((f"wheels/{project}-{ver}-py3-none-any.whl", random.Random(seed).randbytes(n), "wheel"))
    return out


def lb(*args: str | Path) -> dict[str, object]:
    p = subprocess.run([sys.executable, "-m", "lockbuild", *map(str, args), "--json"], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"lockbuild {' '.join(map(str, args))} failed: {p.stderr}")
    return dict(json.loads(p.stdout))


def timed(fn: object) -> tuple[float, object]:
    t = time.perf_counter()
    r = fn()  # type: ignore[operator]
    return time.perf_counter() - t, r


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.02)
    ap.add_argument("--fanout", default="1,4,16")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockbuild-bench-site-"))
    try:
        secret, public = write_keypair(work / "k", password=None)
        trust = work / "trust"
        trust.mkdir()
        shutil.copy(public, trust)
        out: dict[str, object] = {"scale": a.scale}
        b = {}
        for name, version, changed in (("base", "1.0", set()), ("patch", "1.0.1", {"vllm"}), ("minor", "1.1", MINOR)):
            b[name] = make_bundle(
                work / name, [secret], version=version, variant="cu128", files=files(version, "cu128", a.scale, changed)
            )
        reg = RealRegistry(work / "registry")
        try:
            ref = reg.ref
            lb("push", b["base"], ref("engines/vllm", "base"), "--trust", trust)
            for kind in ("patch", "minor"):
                lb("push", b[kind], ref("engines/vllm", kind), "--trust", trust)
                full = b[kind].stat().st_size
                d = lb("delta", b[kind], "--base", b["base"], "--out", work / f"delta-{kind}", "--trust", trust)
                store = work / f"store-{kind}"
                lb("import", b["base"], "--trust", trust, "--store", store)
                t_full, _ = timed(lambda k=kind: lb("import", b[k], "--trust", trust, "--store", work / f"s-{k}"))
                t_delta, _ = timed(
                    lambda k=kind, dd=d: lb("import", dd["delta"], "--trust", trust, "--store", work / f"store-{k}")
                )
                pstore = work / f"pull-{kind}"
                lb("pull", ref("engines/vllm", "base"), "--store", pstore, "--trust", trust)
                t_pull, pulled = timed(
                    lambda k=kind, ps=pstore: lb("pull", ref("engines/vllm", k), "--store", ps, "--trust", trust)
                )
                moved = int(pulled["fetched_bytes"])  # type: ignore[index]
                out[f"update_{kind}"] = {
                    "full_bytes": full,
                    "delta_bytes": int(d["size"]),
                    "pull_bytes": moved,
                    "delta_ratio": round(int(d["size"]) / full, 4),
                    "pull_ratio": round(moved / full, 4),
                    "full_import_s": round(t_full, 2),
                    "delta_import_s": round(t_delta, 2),
                    "pull_s": round(t_pull, 2),
                }
            fan: dict[str, object] = {}
            for k in map(int, a.fanout.split(",")):

                def pull_one(i: int, k: int = k) -> None:
                    lb("pull", ref("engines/vllm", "base"), "--store", work / f"fan{k}-{i}", "--trust", trust)

                def copy_one(i: int, k: int = k) -> None:
                    shutil.copyfile(b["base"], work / f"copy{k}-{i}.lbz")

                with ThreadPoolExecutor(k) as pool:
                    t_pull, _ = timed(lambda p=pool, k=k: list(p.map(pull_one, range(k))))
                with ThreadPoolExecutor(k) as pool:
                    t_copy, _ = timed(lambda p=pool, k=k: list(p.map(copy_one, range(k))))
                fan[str(k)] = {
                    "pull_s": round(t_pull, 2),
                    "copy_s": round(t_copy, 2),
                    "ratio": round(t_pull / max(t_copy, 1e-6), 2),
                }
                for i in range(k):
                    shutil.rmtree(work / f"fan{k}-{i}", ignore_errors=True)
                    (work / f"copy{k}-{i}.lbz").unlink(missing_ok=True)
            out["fanout"] = fan
        finally:
            reg.close()
        store = work / "dedupe"
        total = 0
        for version, changed in (("2.0", set()), ("2.0.1", {"vllm"}), ("2.1", MINOR)):
            for variant in ("cu128", "cu129"):
                p = make_bundle(
                    work / f"d-{version}-{variant}",
                    [secret],
                    version=version,
                    variant=variant,
                    files=files(version, variant, a.scale, changed),
                )
                total += p.stat().st_size
                lb("import", p, "--trust", trust, "--store", store)
        used = du(store / "blobs")
        out["dedupe"] = {"bundles_bytes": total, "store_bytes": used, "ratio": round(used / total, 4)}
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
