"""A/B of lockbuild source trees on one generated workload, step by step, in the same run.

    python -m bench.ab [--workload vllm-shape] [--scale 1] [--repeat 2] [--no-pep658] [--steps S,S]
                       LABEL=TREE [LABEL=TREE ...]

TREE is a directory holding a lockbuild source tree (``git archive COMMIT | tar -x -C TREE``; ``.`` is
this one); each command runs with TREE as its working directory and on its PYTHONPATH, so it is that
tree's lockbuild. For every repetition, each step runs for every tree back to back (the pairs share the
machine's load), each tree with its own cache:

    lock, cold          lockbuild lock (empty cache)
    build, cold         lockbuild build (the cache holds only the lock's look-ups)
    lock, rebuild       lockbuild lock again: uv's resolution remembered, every pin checked on the index
    build, warm         lockbuild build on the full cache
    sha256 pass         digest_signed_file without prehash (in-process) of the cold build's bundle,
                        beside ``openssl dgst -sha256`` of the same file

Wall and CPU seconds (user + system of the command and its children, from wait4) per step and tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from bench.__main__ import PLATFORM, PY, RECIPE, SYNTHETIC, keys, log
from bench.index import StaticIndex
from bench.measure import Run, run
from bench.suite import clean_env
from bench.workload import generate

HERE = Path(__file__).resolve().parent
STEPS = ("lock, cold", "build, cold", "lock, rebuild", "build, warm", "sha256 pass", "openssl dgst -sha256")
KEYS = dict(zip(("lock-cold", "build-cold", "lock-rebuild", "build-warm", "sha256"), STEPS[:5], strict=True))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="vllm-shape", choices=("small", "vllm-shape"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-pep658", action="store_true", help="an index that lists no METADATA files")
    ap.add_argument("--steps", default=",".join(KEYS), help=f"some of {','.join(KEYS)} (default: all)")
    ap.add_argument("trees", nargs="+", metavar="LABEL=TREE")
    args = ap.parse_args(argv)
    trees = {label: Path(tree).resolve() for label, _, tree in (t.partition("=") for t in args.trees)}
    w = generate(args.workload, args.scale, HERE / "work")
    server = StaticIndex(w.files_dir, w.files, pep658=not args.no_pep658)
    steps = [step for key, step in KEYS.items() if key in args.steps.split(",")]
    work = HERE / "work" / "ab"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    recipe = work / "engine.toml"
    recipe.write_text(RECIPE.format(**SYNTHETIC, python=PY, platform=PLATFORM))
    secret, _ = keys(work)
    got: dict[tuple[str, str], list[Run]] = {}
    try:
        for i in range(args.repeat):
            for label in trees:
                shutil.rmtree(work / label, ignore_errors=True)
            for step in steps:
                for label, tree in trees.items():
                    runs = _step(step, tree, work / label, recipe, secret, server.index_url)
                    for name, r in runs:
                        got.setdefault((label, name), []).append(r)
                        log(f"rep {i} {label:>8} {name:<22} {r.seconds:7.2f} s  {r.cpu_s:7.2f} CPU-s")
    finally:
        server.close()
    sys.stdout.write(_table(w.name, trees, got, args.repeat))
    (work / "ab.json").write_text(
        json.dumps({f"{k[0]}|{k[1]}": [[r.seconds, r.cpu_s] for r in v] for k, v in got.items()}, indent=1)
    )
    return 0


def _step(step: str, tree: Path, d: Path, recipe: Path, secret: Path, index_url: str) -> list[tuple[str, Run]]:
    env = {
        **clean_env(),
        "PYTHONPATH": str(tree),
        "LOCKBUILD_INDEX_URL": index_url,
        "LOCKBUILD_CACHE_DIR": str(d / "cache"),
        "LOCKBUILD_GITHUB_API": "http://127.0.0.1:9/api",
        "LOCKBUILD_GITHUB_DOWNLOAD": "http://127.0.0.1:9/gh",
        "LOCKBUILD_OSV_URL": "none",
    }
    lb = [sys.executable, "-m", "lockbuild"]
    if step.startswith("lock"):
        out = d / f"lock-{step.split(', ')[1]}"
        shutil.rmtree(out, ignore_errors=True)
        return [(step, run([*lb, "lock", str(recipe), "--out", str(out), "--json"], env=env, cwd=tree))]
    if step.startswith("build"):
        out = d / f"dist-{step.split(', ')[1]}"
        shutil.rmtree(out, ignore_errors=True)
        r = run([*lb, "build", str(recipe), "--key", str(secret), "--out", str(out), "--json"], env=env, cwd=tree)
        if step == "build, warm":
            shutil.rmtree(out, ignore_errors=True)  # the cold one is kept for the sha256 pass
        return [(step, r)]
    bundle = next((d / "dist-cold").glob("*.lbz"))
    code = (
        "import json, sys, time; from pathlib import Path; from lockbuild.trust import digest_signed_file; "
        "t = time.perf_counter(); digest_signed_file(Path(sys.argv[1]), prehash=False); "
        "print(json.dumps({'seconds': time.perf_counter() - t}))"
    )
    r = run([sys.executable, "-c", code, str(bundle)], env=env, cwd=tree)
    inproc = Run(r.argv, json.loads(r.stdout)["seconds"], r.max_rss_kb, r.stdout, r.stderr, r.cpu_s)
    ossl = run(["openssl", "dgst", "-sha256", str(bundle)], env=env, cwd=tree)
    os.sync()
    return [("sha256 pass", inproc), ("openssl dgst -sha256", ossl)]


def _table(name: str, trees: dict[str, Path], got: dict[tuple[str, str], list[Run]], repeat: int) -> str:
    labels = list(trees)
    head = "| step | " + " | ".join(f"{t} wall s | {t} CPU s" for t in labels) + " |\n"
    rule = "|---|" + "---:|---:|" * len(labels) + "\n"
    rows = []
    for step in STEPS:
        cells = []
        for t in labels:
            runs = got.get((t, step), [])
            wall = statistics.median(r.seconds for r in runs) if runs else float("nan")
            cpu = statistics.median(r.cpu_s for r in runs) if runs else float("nan")
            cells.append(f"{wall:.2f} | {cpu:.2f}")
        rows.append(f"| {step} | " + " | ".join(cells) + " |\n")
    return f"## A/B on {name}: median of {repeat} run(s) each\n\n" + head + rule + "".join(rows)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
