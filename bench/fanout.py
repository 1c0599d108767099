"""Many nodes at once: N concurrent pulls from one real local registry, against a plain client.

    bench/run fanout [--nodes 24] [--scale 0.005] [--repeat 3]
    .venv/bin/python -m bench.fanout ...

One vLLM-shaped bundle (bench/site.py's file set: 141 wheels, sizes scaled by --scale of 4.9 GB,
incompressible) is pushed to CNCF distribution (Debian's docker-registry) on 127.0.0.1. Measured, in
the same run, each as the median of --repeat rounds:

- ``lockbuild pull`` by one node, and by N nodes at once (each its own store, each a process);
- the plain client doing the same work: ``curl`` of the manifest and every blob (4 at a time, as
  pull's default ``--jobs``), then ``sha256sum`` of every file and ``sync``; by one node and by N;
- the N-node pull through a throttling proxy (tests/throttle.py) that forwards everything, and
  through the same proxy answering 30 % of blob GETs with 429 and 10 % with 503 (never the same blob
  more than 3 times in a row): the retries made and the time against the clean run through the proxy.

The factors (N at once over one) are what count: N processes share this machine's cores, the
registry's too. Results: JSON on stdout and in bench/results/<date>-fanout.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from registrykit import RealRegistry  # noqa: E402
from sitekit import make_bundle  # noqa: E402
from throttle import Refusal, Throttle  # noqa: E402

from bench.site import files, lb  # noqa: E402
from lockbuild.minisign import write_keypair  # noqa: E402

REPO, TAG = "engines/vllm", "0.11.0-cu128"


def busy_rule(seed: int) -> Callable[[str, str, int], Refusal | None]:
    """30 % of blob GETs answered 429, 10 % 503; a blob refused 3 times in a row is forwarded next."""
    draw = random.Random(seed)
    in_a_row: dict[str, int] = {}

    def rule(method: str, path: str, n: int) -> Refusal | None:
        if method != "GET" or "/blobs/sha256:" not in path:
            return None
        x = draw.random()
        if in_a_row.get(path, 0) >= 3 or x >= 0.4:
            in_a_row[path] = 0
            return None
        in_a_row[path] = in_a_row.get(path, 0) + 1
        return (429, {}) if x < 0.3 else (503, {})

    return rule


def at_once(commands: list[list[str]]) -> tuple[float, list[str]]:
    """Start every command at once, wait for all; the wall time and each one's stdout. A failure ends the bench."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    outs = [p.communicate() for p in procs]
    took = time.perf_counter() - t0
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode:
            raise SystemExit(f"a node failed ({p.returncode}): {err[-2000:]}")
    return took, [o for o, _ in outs]


def pull_cmd(ref: str, store: Path, trust: Path) -> list[str]:
    return [sys.executable, "-m", "lockbuild", "pull", ref, "--store", str(store), "--trust", str(trust), "--json"]


def curl_cmd(host: str, digests: list[str], out: Path) -> list[str]:
    base = f"http://{host}/v2/{REPO}"
    args = [f"-H 'Accept: application/vnd.oci.image.manifest.v1+json' -o {out}/manifest {base}/manifests/{TAG}"]
    args += [f"-o {out}/{d.removeprefix('sha256:')} {base}/blobs/{d}" for d in digests]
    script = (
        f"mkdir -p {out} && curl -sSf --parallel --parallel-max 4 {' '.join(args)} && "
        f"sha256sum {out}/* > /dev/null && sync"
    )
    return ["sh", "-c", script]


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench/run fanout")
    ap.add_argument("--nodes", type=int, default=24)
    ap.add_argument("--scale", type=float, default=0.005, help="of vLLM 0.11.0's 4.9 GB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockbuild-bench-fanout-"))
    out: dict[str, object] = {
        "nodes": a.nodes,
        "scale": a.scale,
        "repeat": a.repeat,
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        secret, public = write_keypair(work / "k", password=None)
        trust = work / "trust"
        trust.mkdir()
        shutil.copy(public, trust)
        bundle = make_bundle(
            work / "b", [secret], version="0.11.0", variant="cu128", files=files("0.11.0", "cu128", a.scale, set())
        )
        reg = RealRegistry(work / "registry")
        try:
            lb("push", bundle, reg.ref(REPO, TAG), "--trust", trust)
            manifest = json.loads(
                subprocess.run(
                    [
                        "curl",
                        "-sSf",
                        "-H",
                        "Accept: application/vnd.oci.image.manifest.v1+json",
                        f"http://{reg.host}/v2/{REPO}/manifests/{TAG}",
                    ],
                    capture_output=True,
                    check=True,
                ).stdout
            )
            digests = [manifest["config"]["digest"], *(x["digest"] for x in manifest["layers"])]
            out["blobs"] = len(digests)
            out["bytes"] = manifest["config"]["size"] + sum(x["size"] for x in manifest["layers"])
            rounds: dict[str, list[float]] = {k: [] for k in ("pull_1", "pull_n", "curl_1", "curl_n")}
            serial = iter(range(10**6))

            def fresh() -> Path:
                return work / "nodes" / str(next(serial))

            def clean() -> None:
                shutil.rmtree(work / "nodes", ignore_errors=True)

            for _ in range(a.repeat):
                rounds["pull_1"].append(at_once([pull_cmd(reg.ref(REPO, TAG), fresh(), trust)])[0])
                clean()
                rounds["curl_1"].append(at_once([curl_cmd(reg.host, digests, fresh())])[0])
                clean()
                rounds["pull_n"].append(
                    at_once([pull_cmd(reg.ref(REPO, TAG), fresh(), trust) for _ in range(a.nodes)])[0]
                )
                clean()
                rounds["curl_n"].append(at_once([curl_cmd(reg.host, digests, fresh()) for _ in range(a.nodes)])[0])
                clean()
            med = {k: statistics.median(v) for k, v in rounds.items()}
            out["seconds"] = {k: [round(x, 2) for x in v] for k, v in rounds.items()}
            out["median_s"] = {k: round(v, 2) for k, v in med.items()}
            pull_factor, curl_factor = med["pull_n"] / med["pull_1"], med["curl_n"] / med["curl_1"]
            out["pull_factor"], out["curl_factor"] = round(pull_factor, 2), round(curl_factor, 2)
            out["factor_vs_curl"] = round(pull_factor / curl_factor, 2)
            out["throttled"] = throttled(reg, trust, a, fresh, clean)
        finally:
            reg.close()
        out["load_average"] = [round(x, 1) for x in os.getloadavg()]  # the machine is shared: say how busy
        text = json.dumps(out, indent=2)
        print(text)
        results = ROOT / "bench" / "results"
        results.mkdir(exist_ok=True)
        (results / f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%dT%H%M%S')}-fanout.json").write_text(text + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def throttled(
    reg: RealRegistry, trust: Path, a: argparse.Namespace, fresh: Callable[[], Path], clean: Callable[[], None]
) -> dict[str, object]:
    """N nodes at once through the proxy: forwarding everything, then refusing 40 % of blob GETs."""
    out: dict[str, object] = {}
    for name, rule in (("clean", None), ("busy", busy_rule(a.seed))):
        proxy = Throttle(reg.host, rule or (lambda m, p, n: None))
        try:
            took, outs = at_once([pull_cmd(proxy.ref(REPO, TAG), fresh(), trust) for _ in range(a.nodes)])
            retries = sum(int(json.loads(o)["retries"]) for o in outs)
            statuses = [s for _, _, s in proxy.refused]
            out[name] = {
                "seconds": round(took, 2),
                "retries": retries,
                "refused_429": statuses.count(429),
                "refused_503": statuses.count(503),
                "blob_gets": sum(1 for m, p, _ in proxy.forwarded if m == "GET" and "/blobs/" in p),
            }
        finally:
            proxy.close()
            clean()
    busy, plain = out["busy"], out["clean"]
    assert isinstance(busy, dict) and isinstance(plain, dict)
    out["busy_vs_clean"] = round(busy["seconds"] / plain["seconds"], 2)
    return out


if __name__ == "__main__":
    main()
