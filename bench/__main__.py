"""bench/run: measure lockbuild against the classic air-gap path (pip download + tar + pip install).

    bench/run [--workload small|vllm-shape|live|vllm-live] [--repeat N] [--scale 0.25,0.5,1] [--plot] [--quick]

Starts a static index on 127.0.0.1 serving a generated workload (or uses the real PyPI for ``live``),
then measures lock, fetch, pack and sign, verify, install and the whole pipeline, for lockbuild and
for its baselines, back to back. Prints a table and writes bench/results/<date>-<workload>.json
(and .png with --plot).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import platform
import shutil
import sys
import time
from pathlib import Path

from bench import report
from bench.index import StaticIndex
from bench.suite import Results, Setup, Suite
from bench.workload import ENGINE, ENGINE_VERSION, generate
from lockbuild import __version__
from lockbuild.minisign import write_keypair
from lockbuild.proc.uvtool import uv_binary, uv_version

HERE = Path(__file__).resolve().parent
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
PLATFORM = "x86_64-manylinux_2_28"

RECIPE = """\
[engine]
name = "{name}"
pypi = "{name}"
binary = "{binary}"
verify = {verify}
gpu-probe = "none"

[[builds]]
version = "{version}"
variant = "cpu"
python = "{python}"
platform = "{platform}"
requirements = ["{name}=={version}"]
"""

# A real, small inference engine on the real PyPI (the repo's demo engine, bundles/onnxruntime.toml).
LIVE = {
    "name": "onnxruntime",
    "version": "1.20.1",
    "binary": "onnxruntime_test",
    "verify": '["python", "-c", "import onnxruntime"]',
}
SYNTHETIC = {"name": ENGINE, "version": ENGINE_VERSION, "binary": ENGINE, "verify": f'["{ENGINE}", "--version"]'}
CHECKS = {"live": ("bin/python", "-c", "import onnxruntime"), "synthetic": (f"bin/{ENGINE}", "--version")}


def log(text: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {text}\n")
    sys.stderr.flush()


def base_python() -> str:
    """The interpreter the installs use: the system's of this version where there is one (the installer
    refuses one that other users cannot reach, such as a pyenv build under /root), else this one's base."""
    system = Path(f"/usr/bin/python{PY}")
    if system.is_file():
        return str(system)
    return str(Path(getattr(sys, "_base_executable", sys.executable)).resolve())


def keys(work: Path) -> tuple[Path, Path]:
    d = work / "keys"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    secret, public = write_keypair(d / "bench", password=None)
    trust = d / "trust"
    trust.mkdir()
    shutil.copy(public, trust / public.name)
    return secret, trust


def run_one(workload: str, scale: float, args: argparse.Namespace, work: Path) -> Results:
    server: StaticIndex | None = None
    if workload == "live":
        label, index_url, spec = "live-pypi-onnxruntime", "https://pypi.org/simple", LIVE
    else:
        log(f"generating {workload} at {scale:g} GB (once; kept under bench/work/workloads/)")
        w = generate(workload, scale, HERE / "work")
        server = StaticIndex(w.files_dir, w.files)
        label, index_url, spec = w.name, server.index_url, SYNTHETIC
    from bench.suite import PHASES

    unknown = [p for p in (args.phases or "").split(",") if p.strip() and p.strip() not in PHASES]
    if unknown:
        raise SystemExit(f"unknown phase(s) {unknown} for {workload}; expected some of {', '.join(PHASES)}.")
    run_dir = work / label
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    recipe = run_dir / f"{spec['name']}.toml"
    recipe.write_text(RECIPE.format(**spec, python=PY, platform=PLATFORM))
    secret, trust = keys(run_dir)
    check = CHECKS["live" if workload == "live" else "synthetic"]
    setup = Setup(
        label,
        run_dir,
        index_url,
        server,
        recipe,
        f"{spec['name']}=={spec['version']}",
        check,
        base_python(),
        secret,
        trust,
        args.repeat,
        args.jobs,
        args.quick,
        args.quiet_wait,
        tuple(p.strip() for p in (args.phases or "").split(",") if p.strip()),
    )
    try:
        results = Suite(setup, log).run_all()
    finally:
        if server is not None:
            server.close()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    results.facts["repeat"] = args.repeat
    results.facts["scale_gb"] = scale
    return results


def machine() -> dict[str, object]:
    import os

    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "lockbuild": __version__,
        "uv": uv_version(uv_binary()),
    }


def summary(results: list[Results]) -> tuple[str, dict[str, dict[str, float]]]:
    """The scaling table and the RSS growth line, for a series of more than one size."""
    growth = report.rss_growth(results)
    worst = max((g["process"] for g in growth.values()), default=0.0)
    tree = max((g["tree"] for g in growth.values()), default=0.0)
    text = (
        "## scaling: median time and peak RSS of each lockbuild step\n\n" + report.scaling_table(results) + "\n\n"
        f"peak RSS growth of the lockbuild processes, smallest → largest: at most {worst:+.1f} MB "
        f"(target < 32 MB: {'met' if worst < 32 else 'missed'}); with their children (uv): at most {tree:+.1f} MB\n"
    )
    return text, growth


def show(paths: list[Path], *, plot: bool, readme: bool = False) -> int:
    if readme:  # the README's table of the cold build, install and site path (vllm-live), from one or more runs
        runs = [Results.from_json(json.loads(p.read_text())["runs"][-1]) for p in paths]
        sys.stdout.write(report.site_readme_table(runs) + "\n")
        return 0
    for path in paths:
        _show(path, plot=plot)
    return 0


def _show(path: Path, *, plot: bool) -> None:
    doc = json.loads(path.read_text())
    results = [Results.from_json(r) for r in doc["runs"]]
    sys.stdout.write(f"{doc['command']}  ({doc['date']}, {doc['machine']})\n\n")
    for r in results:
        sys.stdout.write(report.table(r) + "\n\n")
    if len(results) > 1:
        sys.stdout.write(summary(results)[0])
    if plot and report.plot(results, path.with_suffix(".png")):
        log(f"wrote {path.with_suffix('.png')}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--workload",
        choices=("small", "vllm-shape", "live", "vllm-live"),
        default="small",
        help="vllm-live: bundles/vllm.toml's vLLM build from the real PyPI (needs ~25 GB free disk)",
    )
    ap.add_argument(
        "--live-version",
        default=None,
        help="vllm-live: the vLLM release measured: 0.33.0 (CUDA 13, 4.3 GB; the default) or 0.11.0 (cu128, 4.9 GB)",
    )
    ap.add_argument("--repeat", type=int, default=None, help="runs of every variant (default 3; vllm-live 1)")
    ap.add_argument(
        "--phases",
        default=None,
        help="some phases only: vllm-live: lock,fetch,build-cold,build-warm,verify,install,import,push-pull,push,"
        "install-store,classic; the others: lock,fetch,pack,verify,install,install-store,pipeline,floor,verify-pass,"
        "push "
        "(lock, fetch and pack then run once, unmeasured, when left out)",
    )
    ap.add_argument(
        "--scale", default=None, help="vllm-shape sizes in GB, e.g. 0.25,0.5,1 (default 1); several = a scaling series"
    )
    ap.add_argument("--jobs", type=int, default=8, help="parallel downloads, for lockbuild and the raw floor")
    ap.add_argument("--quick", action="store_true", help="skip the slow classic baselines (pip, tar czf)")
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="before each command, wait up to this many seconds for other processes to go quiet",
    )
    ap.add_argument("--plot", action="store_true", help="also write a PNG (needs matplotlib)")
    ap.add_argument("--keep", action="store_true", help="keep the work directories under bench/work/runs/")
    ap.add_argument(
        "--report", type=Path, nargs="+", metavar="RESULTS.json", help="print the tables of saved runs and exit"
    )
    ap.add_argument(
        "--readme",
        action="store_true",
        help="with --report: the README's table of the cold build, the install and the site path "
        "(each step from the last of the runs that measured it)",
    )
    args = ap.parse_args(argv)
    if args.report is not None:
        return show(args.report, plot=args.plot, readme=args.readme)
    if args.repeat is None:
        args.repeat = 1 if args.workload == "vllm-live" else 3
    scales = [float(x) for x in args.scale.split(",")] if args.scale else [1.0]
    if args.workload != "vllm-shape":
        scales = [0.03]
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    work = HERE / "work" / "runs" / stamp
    all_results: list[Results] = []
    started = time.monotonic()
    for scale in scales:
        if args.workload == "vllm-live":
            from bench import vllm_live

            r = vllm_live.main(args, work / "vllm-live", keys(work / "vllm-live-keys"), log)
            all_results.append(r)
            sys.stdout.write(report.table(r) + "\n\n")
            break
        r = run_one(args.workload, scale, args, work)
        all_results.append(r)
        sys.stdout.write(report.table(r) + "\n\n")
        sys.stdout.flush()
    doc: dict[str, object] = {
        "command": "bench/run " + " ".join(argv),
        "date": stamp,
        "machine": machine(),
        "seconds": round(time.monotonic() - started, 1),
        "runs": [r.to_json() for r in all_results],
    }
    if len(all_results) > 1:
        text, doc["rss_growth_mb"] = summary(all_results)
        sys.stdout.write(text)
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    name = f"{stamp}-{args.workload}" + ("-scaling" if len(all_results) > 1 else "")
    out = results_dir / f"{name}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out.relative_to(HERE.parent)}")
    if args.plot:
        png = results_dir / f"{name}.png"
        if report.plot(all_results, png):
            log(f"wrote {png.relative_to(HERE.parent)}")
        else:
            log("no plot: matplotlib is not installed (pip install matplotlib)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
