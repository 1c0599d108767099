"""``python -m bench.fetchcost``: what reading the fatbins costs a cold ``lockbuild fetch`` of a real build.

    python -m bench.fetchcost [--recipe bundles/vllm.toml] [--build 0.33.0-cu130-flashinfer] [--repeat 1]

In one run, each repetition on fresh caches, on the same lock: ``lockbuild fetch`` (which reads the GPU code
of every wheel as it enters the cache), the same fetch with the reading switched off (bench/lbrun.py's
BENCH_NO_GPU_READING, a switch only this bench sets), and the floor: ``uv pip compile`` with the lock's flags
(cold uv cache) + ``curl --parallel`` (8 streams) of the lock's files. Then ``lockbuild fetch`` again on the
first fetch's cache, counting the archives it reads (a rebuild reads none: the readings are kept). It needs
the network and about twice the build's size free under --work (default bench/work/fetchcost). Prints a
Markdown table and the ratios; the figures go to bench/results/DATE-fetchcost.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

from bench.measure import Run, run, wait_quiet
from bench.suite import LOCKBUILD, clean_env
from lockbuild.proc.uvtool import uv_binary

HERE = Path(__file__).resolve().parent
ON, OFF = "lockbuild fetch, cold (reads every wheel's GPU code)", "lockbuild fetch, cold, reading switched off"
UV, CURL = "uv pip compile (same flags, cold uv cache)", "curl --parallel (8) of the lock's files"
FLOOR = "floor: uv pip compile + curl --parallel"
WARM = "lockbuild fetch, warm cache (the rebuild)"


def _requirements(recipe: Path, build_id: str) -> list[str]:
    doc = tomllib.loads(recipe.read_text(encoding="utf-8"))
    for b in doc["builds"]:
        if build_id in (b["variant"], f"{b['version']}-{b['variant']}"):
            return list(b["requirements"])
    raise SystemExit(f"fetchcost: {recipe} has no build {build_id}")


def _uv_compile(doc: dict[str, Any], output: Path) -> list[str]:
    """The flags lockbuild's lock gives uv (as bench/vllm_live.py's floor)."""
    return [
        uv_binary(),
        *("pip", "compile", "-", "--python-version", doc["python"], "--python-platform", doc["platform"]),
        *("--exclude-newer", doc["as_of"], "--index-url", "https://pypi.org/simple", "--generate-hashes"),
        *("--no-header", "--quiet", "--only-binary", ":all:", "--output-file", str(output)),
    ]


class Bench:
    def __init__(self, recipe: Path, build: str, work: Path) -> None:
        self.recipe, self.build, self.work = recipe, build, work
        self.env = clean_env()
        self.figures: dict[str, list[dict[str, float]]] = {}

    def fresh(self, name: str) -> Path:
        p = self.work / name
        if p.is_file():
            p.unlink()
        shutil.rmtree(p, ignore_errors=True)
        return p

    def timed(self, variant: str, argv: list[str], env: dict[str, str], stdin: str | None = None) -> Run:
        wait_quiet(max_wait=20)
        r = run(argv, env=env, stdin=stdin)
        others = r.others_cpu_s / max(r.seconds, 1e-9)
        self.figures.setdefault(variant, []).append({"s": r.seconds, "cpu_s": r.cpu_s, "others_busy": others})
        print(f"  {variant}: {r.seconds:.1f} s, CPU {r.cpu_s:.1f} s, others busy {others:.2f}", flush=True)
        return r

    def fetch(self, variant: str, cache: Path, extra: dict[str, str] | None = None) -> dict[str, Any]:
        out = self.fresh("out")
        argv = [*LOCKBUILD, "fetch", str(self.recipe), "--build", self.build, "--out", str(out), "--json"]
        env = {**self.env, "LOCKBUILD_CACHE_DIR": str(cache), **(extra or {})}
        doc: dict[str, Any] = json.loads(self.timed(variant, argv, env).stdout)["fetches"][0]
        shutil.rmtree(out, ignore_errors=True)
        return doc

    def floor(self, doc: dict[str, Any]) -> None:
        uv_cache, files = self.fresh("uv-cache"), self.fresh("curl")
        stdin = "".join(r + "\n" for r in _requirements(self.recipe, self.build))
        self.timed(UV, _uv_compile(doc, self.work / "uv.txt"), {**self.env, "UV_CACHE_DIR": str(uv_cache)}, stdin)
        files.mkdir(parents=True)
        cfg = self.work / "curl.cfg"
        cfg.write_text("".join(f'url = "{p["url"]}"\noutput = "{files / p["file"]}"\n' for p in doc["packages"]))
        self.timed(CURL, ["curl", "--parallel", "--parallel-max", "8", "--fail", "-sS", "-L", "-K", str(cfg)], self.env)
        shutil.rmtree(files, ignore_errors=True)
        shutil.rmtree(uv_cache, ignore_errors=True)
        u, c = self.figures[UV][-1], self.figures[CURL][-1]
        self.figures.setdefault(FLOOR, []).append({"s": u["s"] + c["s"], "cpu_s": u["cpu_s"] + c["cpu_s"]})

    def run_all(self, repeat: int) -> dict[str, Any]:
        self.work.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {}
        for i in range(repeat):
            print(f"[fetchcost] repetition {i + 1} of {repeat}", flush=True)
            self.fetch(OFF, self.fresh("cache-off"), {"BENCH_NO_GPU_READING": "1"})
            shutil.rmtree(self.work / "cache-off", ignore_errors=True)
            counted = self.fresh("readings.txt")
            doc = self.fetch(ON, self.fresh("cache-on"), {"BENCH_COUNT_READINGS": str(counted)})
            cold = counted.read_text().splitlines() if counted.exists() else []
            self.figures.setdefault("cold archives read", []).append({"n": float(len(cold))})
            self.floor(doc)
            counted = self.fresh("readings.txt")
            self.fetch(WARM, self.work / "cache-on", {"BENCH_COUNT_READINGS": str(counted)})
            read = counted.read_text().splitlines() if counted.exists() else []
            self.figures.setdefault("warm archives read", []).append({"n": float(len(read))})
            print(f"  the rebuild read {len(read)} archives", flush=True)
            shutil.rmtree(self.work / "cache-on", ignore_errors=True)
        size = sum(int(p["size"]) for p in doc["packages"])
        return {"build": self.build, "files": len(doc["packages"]), "bytes": size, "figures": self.figures}


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def report(result: dict[str, Any]) -> str:
    f = result["figures"]
    lines = [
        f"*{result['build']}: {result['files']} files, {result['bytes'] / 1e9:.2f} GB, "
        f"{len(f[ON])} run(s) each, fresh caches*",
        "",
        "| variant | median s | CPU s | MB/s | others busy |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in (ON, OFF, UV, CURL, FLOOR, WARM):
        s, cpu = _median([x["s"] for x in f[name]]), _median([x["cpu_s"] for x in f[name]])
        busy = _median([x.get("others_busy", 0.0) for x in f[name]])
        lines.append(f"| {name} | {s:.1f} | {cpu:.1f} | {result['bytes'] / 1e6 / s:,.0f} | {busy:.2f} |")
    lines += ["", "| ratio (pair by pair) | median | min–max |", "|---|---:|---:|"]
    for label, a, b, key in (
        ("fetch with reading / without (wall)", ON, OFF, "s"),
        ("fetch with reading / without (CPU)", ON, OFF, "cpu_s"),
        ("fetch with reading / floor (uv + curl)", ON, FLOOR, "s"),
        ("fetch without reading / floor (uv + curl)", OFF, FLOOR, "s"),
    ):
        r = [x[key] / max(y[key], 1e-9) for x, y in zip(f[a], f[b], strict=True)]
        lines.append(f"| {label} | {_median(r):.2f} | {min(r):.2f}–{max(r):.2f} |")
    cold, warm = (max(int(x["n"]) for x in f[k]) for k in ("cold archives read", "warm archives read"))
    lines.append(f"\nthe cold fetch read {cold} archives' GPU code; the rebuild (warm fetch) read {warm}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fetchcost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", type=Path, default=HERE.parent / "bundles" / "vllm.toml")
    ap.add_argument("--build", default="0.33.0-cu130-flashinfer")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=HERE / "work" / "fetchcost")
    a = ap.parse_args()
    result = Bench(a.recipe.resolve(), a.build, a.work.resolve()).run_all(a.repeat)
    out = HERE / "results" / f"{time.strftime('%Y-%m-%d')}-fetchcost.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
