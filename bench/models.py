"""Models: ``lockbuild build MODEL.toml`` and ``lockbuild install --models`` against the floors, on
incompressible safetensors shards served by the tests' fake Hugging Face Hub (LFS files through a 302 to
its CDN, on another port).

- build: ``lockbuild build`` (cold cache: list the revision, download every file in parallel through the
  fetcher, check each sha256 / git blob sha1, pack the stored members, sign) against ``curl --parallel``
  of the same resolve URLs (following the 302) and ``sha256sum`` of what it wrote;
- install: ``lockbuild install MODEL.lbz --models M --trust T`` (the trust decision, every member's
  sha256, the Hub cache layout) against ``tar -x`` of an uncompressed tar of the same files and
  ``sha256sum`` of them.

Peak RSS is the command's (and its children's: the signing process) under ``/usr/bin/time``; it should
stay flat as the model grows. Run from the repository root::

    python -m bench.models                       # 150, 300 and 600 MB, 2 runs each
    python -m bench.models --sizes 600 --repeat 3 --jobs 8
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubkit import REPO, tiny_model  # noqa: E402
from servers import FakeHub, FakeServer  # noqa: E402

from bench.measure import Run, run, shell  # noqa: E402
from lockbuild.minisign import write_keypair  # noqa: E402

MB = 1 << 20


def _env(work: Path, hub: FakeHub, cache: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HF_ENDPOINT=hub.endpoint,
        LOCKBUILD_CACHE_DIR=str(cache),
        NO_PROXY="*",
        no_proxy="*",
        PYTHONPATH=os.environ.get("PYTHONPATH", str(ROOT)),
    )
    return env


def _lockbuild(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "lockbuild", *map(str, args)]


def one_size(size_mb: int, repeat: int, jobs: int, work: Path) -> dict[str, object]:
    cdn = FakeServer()
    hub = FakeHub(cdn)
    try:
        files = tiny_model(extra_bytes=size_mb * MB // 2)  # two shards of half the size each, plus small files
        commit = hub.add_repo(REPO, files)
        taken = {
            p: d
            for p, d in files.items()
            if not p.startswith("original/") and not p.endswith(".bin") and p not in (".gitattributes", "README.md")
        }
        total = sum(len(d) for d in taken.values())
        secret, public = write_keypair(work / "release", password=None)
        trust = work / "trust"
        trust.mkdir()
        (trust / public.name).write_bytes(public.read_bytes())
        recipe = work / "model.toml"
        recipe.write_text(
            f'[model]\nname = "bench-model"\nrepo = "{REPO}"\nrevision = "{commit}"\nexclude = ["original/*"]\n'
        )
        urls = {p: f"{hub.endpoint}/{REPO}/resolve/{commit}/{p}" for p in taken}
        rows: dict[str, list[Run]] = {
            "build": [],
            "curl+sha256sum": [],
            "install": [],
            "tar -x+sha256sum": [],
            "install --store": [],
        }
        bundle: Path | None = None
        for i in range(repeat):
            r = work / f"run{i}"
            r.mkdir()
            env = _env(work, hub, r / "cache")
            got = run(_lockbuild("build", recipe, "--key", secret, "--out", r / "out", "--json"), env=env)
            rows["build"].append(got)
            bundle = Path(json.loads(got.stdout)["bundles"][0]["bundle"])
            (r / "curl").mkdir()
            args = " ".join(f"-o '{r / 'curl' / p.replace('/', '_')}' '{u}'" for p, u in urls.items())
            rows["curl+sha256sum"].append(
                shell(
                    f"curl -sSfL --parallel --parallel-max {jobs} {args}"
                    f" && cd '{r / 'curl'}' && sha256sum * > /dev/null",
                    env=env,
                )
            )
            rows["install"].append(
                run(_lockbuild("install", bundle, "--models", r / "models", "--trust", trust), env=env)
            )
            store = r / "store"  # beside --models, on the same file system: the blobs are hard-linked
            run(_lockbuild("import", bundle, "--trust", trust, "--store", store), env=env)  # not timed
            rows["install --store"].append(
                run(
                    _lockbuild(
                        "install",
                        f"bench-model/{commit}-hf",
                        "--store",
                        store,
                        "--models",
                        r / "models-from-store",
                        "--trust",
                        trust,
                    ),
                    env=env,
                )
            )
            tar = r / "files.tar"
            shell(f"cd '{r / 'curl'}' && tar -cf '{tar}' *", env=env)
            (r / "untar").mkdir()
            rows["tar -x+sha256sum"].append(
                shell(f"tar -xf '{tar}' -C '{r / 'untar'}' && cd '{r / 'untar'}' && sha256sum * > /dev/null", env=env)
            )
            shutil.rmtree(r)
        out: dict[str, object] = {"size_mb": size_mb, "bytes": total, "files": len(taken)}
        for name, runs in rows.items():
            out[name] = {
                "seconds": [round(x.seconds, 2) for x in runs],
                "rss_mb": [round(x.max_rss_kb / 1024) for x in runs],
                "cpu_s": [round(x.cpu_s, 2) for x in runs],
            }
        return out
    finally:
        hub.close()
        cdn.close()


def _median(row: dict[str, object], name: str, key: str) -> float:
    values = row[name]
    return float(statistics.median(values[key]))  # type: ignore[index]


def report(rows: list[dict[str, object]]) -> str:
    lines = [
        "| model | build s (CPU s) | curl+sha256sum s (CPU s) | ratio | install s (CPU s) | "
        "tar -x+sha256sum s (CPU s) | ratio | install --store s | store / .lbz | build peak RSS | "
        "install peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        b, c = _median(row, "build", "seconds"), _median(row, "curl+sha256sum", "seconds")
        i, t = _median(row, "install", "seconds"), _median(row, "tar -x+sha256sum", "seconds")
        cpu = {name: _median(row, name, "cpu_s") for name in ("build", "curl+sha256sum", "install", "tar -x+sha256sum")}
        size = int(str(row["bytes"])) / MB
        rss_b, rss_i = _median(row, "build", "rss_mb"), _median(row, "install", "rss_mb")
        st = _median(row, "install --store", "seconds")
        lines.append(
            f"| {size:.0f} MB, {row['files']} files | {b:.2f} ({cpu['build']:.1f}) | {c:.2f} "
            f"({cpu['curl+sha256sum']:.1f}) | {b / c:.2f}× | {i:.2f} ({cpu['install']:.1f}) | {t:.2f} "
            f"({cpu['tar -x+sha256sum']:.1f}) | {i / t:.2f}× | {st:.2f} | {st / i:.2f}× | {rss_b:.0f} MB | "
            f"{rss_i:.0f} MB |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="150,300,600", help="model sizes in MB, comma-separated")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=8, help="curl's parallel transfers (lockbuild's default is 8)")
    args = ap.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
            rows.append(one_size(size, args.repeat, args.jobs, Path(tmp)))
        print(json.dumps(rows[-1]), flush=True)
    print(report(rows))
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H%M%S")
    (results / f"{stamp}-models.json").write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
