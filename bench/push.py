"""The push phase: ``lockbuild push`` of the built bundle to a real local registry, against its floor.

    bench/run --workload vllm-shape --scale 1 --phases push
    bench/run --workload vllm-live --phases push

Each round starts CNCF distribution (Debian's ``docker-registry``, as the tests start it) afresh on
127.0.0.1, so every push goes to a new, empty repository, and measures, back to back:

- ``lockbuild push ENGINE/VERSION-VARIANT --store`` (the site's path: a store imported from the bundle,
  untimed);
- ``lockbuild push BUNDLE.lbz`` (the bundle as built: its members extracted and checked on the way);
- the floor: a raw parallel upload of the same blobs (the store's blob files and the config) with curl,
  one ``POST /v2/<repo>/blobs/uploads/`` and one monolithic ``PUT <location>&digest=sha256:...`` per
  blob, ``JOBS`` at a time (push's default ``--jobs``), nothing checked.

Wall time and CPU-seconds (the command and its children; the registry's own CPU is not counted) go into
the figures; the ratios are each push over the floor, round by round.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from bench.measure import Figure, Ratio, Run, StepFailed, run

PHASE = "push"
JOBS = 4  # lockbuild push's default --jobs, and the floor's parallel uploads
PUSH_STORE = "lockbuild push ENGINE/VERSION-VARIANT --store (new repository)"
PUSH_LBZ = "lockbuild push BUNDLE.lbz (new repository)"
RAW_PUSH = f"raw parallel upload of the same blobs (curl POST + monolithic PUT, {JOBS} at a time)"
REPO, TAG = "engines/bench", "push"
TESTS = Path(__file__).resolve().parent.parent / "tests"
# one blob: start an upload, then PUT the whole file to the location the registry gave, with its digest
UPLOAD = r"""set -euo pipefail
blob=$1; base=$2
loc=$(curl -sSf -X POST -o /dev/null -w '%header{location}' "$base/blobs/uploads/")
case $loc in /*) loc="${base%%/v2/*}$loc";; esac
case $loc in *\?*) sep='&';; *) sep='?';; esac
curl -sSf -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' -T "$blob" \
  "$loc${sep}digest=sha256:$(basename "$blob")"
"""


class Host(Protocol):
    """What a suite gives the phase: its measured commands and its figures."""

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> Run: ...
    def shell(self, script: str, env: dict[str, str] | None = None) -> Run: ...
    def timed(self, phase: str, variant: str, r: Run, *, size: int = 0) -> Run: ...


def measure(
    host: Host, lockbuild: list[str], env: dict[str, str], bundle: Path, trust: Path, work: Path, repeat: int
) -> dict[str, Any]:
    """Every round of the phase; the facts (blobs, bytes) for the results."""
    sys.path.insert(0, str(TESTS))
    from registrykit import RealRegistry, binary  # type: ignore[import-not-found, unused-ignore]

    if binary() is None:
        raise StepFailed("the push phase needs docker-registry (CNCF distribution) on PATH; scripts/test installs it.")
    store = work / "push-store"
    shutil.rmtree(store, ignore_errors=True)
    got = json.loads(
        run([*lockbuild, "import", str(bundle), "--trust", str(trust), "--store", str(store), "--json"], env=env).stdout
    )
    build = str(got["build"])
    blobs = sorted((store / "blobs" / "sha256").iterdir())
    size = sum(b.stat().st_size for b in blobs)
    script = work / "push-one.sh"
    script.write_text(UPLOAD)
    listing = work / "push-blobs.txt"
    listing.write_text("".join(f"{b}\n" for b in blobs))

    def fresh() -> tuple[Any, str]:
        place = work / "push-registry"
        shutil.rmtree(place, ignore_errors=True)
        reg = RealRegistry(place)
        return reg, reg.ref(REPO, TAG)

    for _ in range(repeat):
        for variant, argv in (
            (PUSH_STORE, [*lockbuild, "push", build, "--store", str(store), "--trust", str(trust)]),
            (PUSH_LBZ, [*lockbuild, "push", str(bundle), "--trust", str(trust)]),
            (RAW_PUSH, None),
        ):
            reg, ref = fresh()
            try:
                if argv is None:
                    base = f"http://{reg.host}/v2/{REPO}"
                    r = host.shell(
                        f"xargs -P {JOBS} -n 1 -a {listing} -I BLOB bash {script} BLOB {shlex.quote(base)}", env=env
                    )
                else:
                    r = host.run(_with_target(argv, ref), env=env)
                host.timed(PHASE, variant, r, size=size)
            finally:
                reg.close()
    shutil.rmtree(work / "push-registry", ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    return {"push_blobs": len(blobs), "push_bytes": size, "push_jobs": JOBS}


def _with_target(argv: list[str], ref: str) -> list[str]:
    """``lockbuild push SOURCE TARGET [options] --json``: the target after the source."""
    at = argv.index("push") + 2
    return [*argv[:at], ref, *argv[at:], "--json"]


def ratios(get: Callable[[str, str], Figure | None]) -> list[Ratio]:
    """Each push over the raw parallel upload, round by round (median in the table); the target 1.5."""
    out: list[Ratio] = []
    floor = get(PHASE, RAW_PUSH)
    if floor is None:
        return out
    for variant, name in (
        (PUSH_STORE, "push --store / raw parallel upload"),
        (PUSH_LBZ, "push .lbz / raw parallel upload"),
    ):
        mine = get(PHASE, variant)
        if mine is None:
            continue
        values = tuple(a / b for a, b in zip(mine.seconds, floor.seconds, strict=False))
        cpu = tuple(a / max(b, 1e-9) for a, b in zip(mine.cpu_s, floor.cpu_s, strict=False))
        med = sorted(values)[len(values) // 2]
        out.append(Ratio(name, values, "<= 1.5", med <= 1.5))
        out.append(Ratio(name.replace("/", "CPU-seconds /", 1), cpu, "(none)", True))
    return out
