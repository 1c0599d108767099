"""Single benchmark steps, each run as its own process (``python -m bench.steps STEP ...``) so that its
wall time and peak RSS are its own. Each prints one JSON object on stdout, with the seconds it spent
on the step itself (after interpreter start and imports).

    raw    FILES.json OUT JOBS        a floor: parallel GETs with httpx, bytes to disk, no hashing
    fetch  WANTED.json CACHE JOBS [TRANSFER]  lockbuild's Fetcher (streaming sha256 + size, content cache);
                                      TRANSFER: curl or httpx (who receives the bytes; default: the Fetcher's)
    pack   RECIPE CACHE KEY OUT       lockbuild's plan, cache check, then pack + sign, timed apart
    digest BUNDLE                     the node's signature pass: digest_signed_file's sha256 (no prehash)
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def raw(files_json: Path, out: Path, jobs: int) -> dict[str, object]:
    import httpx

    files = json.loads(files_json.read_text())
    out.mkdir(parents=True, exist_ok=True)
    limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs)
    started = time.perf_counter()
    with httpx.Client(limits=limits, timeout=60.0, follow_redirects=True) as client:

        def one(f: dict[str, str]) -> int:
            n = 0
            with client.stream("GET", f["url"]) as resp, (out / f["name"]).open("wb") as dst:
                resp.raise_for_status()
                for chunk in resp.iter_raw():  # as the network delivers it: re-chunking only adds copies
                    dst.write(chunk)
                    n += len(chunk)
            return n

        order = sorted(files, key=lambda f: -int(f.get("size") or 0))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            total = sum(pool.map(one, order))
    return {"seconds": time.perf_counter() - started, "bytes": total}


def fetch(wanted_json: Path, cache_dir: Path, jobs: int, transfer: str | None = None) -> dict[str, object]:
    from lockbuild.fetch.cache import Cache
    from lockbuild.fetch.fetcher import Fetcher, Wanted
    from lockbuild.fetch.http import make_client

    wanted = [Wanted(w["url"], w["sha256"], w["size"], w["label"]) for w in json.loads(wanted_json.read_text())]
    started = time.perf_counter()
    with make_client(connections=jobs) as client:
        client.follow_redirects = True
        fetcher = Fetcher(Cache(cache_dir), client, jobs=jobs)
        if transfer is not None:
            fetcher.transfer = "curl" if transfer == "curl" else "httpx"
        report = fetcher.fetch_all(wanted)
    return {
        "seconds": time.perf_counter() - started,
        "files": len(report.files),
        "cached": report.cached,
        "downloaded_bytes": report.downloaded_bytes,
    }


def pack(recipe_path: Path, cache_dir: Path, key: Path, out: Path) -> dict[str, object]:
    from lockbuild.builder.pack import assemble, sign, write
    from lockbuild.builder.session import session
    from lockbuild.minisign import read_secret_key
    from lockbuild.progress import Progress
    from lockbuild.recipe import load_recipe
    from lockbuild.settings import load

    recipe = load_recipe(recipe_path)
    secret = read_secret_key(key, lambda: "")
    t0 = time.perf_counter()
    settings = load(os.environ, home=Path.home(), cache_dir=cache_dir)
    with session(settings, progress=Progress.quiet()) as s:
        plan = s.planner.plan(recipe, recipe.builds[0])
        t1 = time.perf_counter()
        paths, report = s.fetch(plan)
        t2 = time.perf_counter()
    manifest, entries = assemble(plan, paths, plan.uv_version)
    packed = sign(write(manifest, entries, out), key=secret)
    t3 = time.perf_counter()
    return {
        "plan_s": t1 - t0,
        "check_s": t2 - t1,
        "pack_s": t3 - t2,
        "downloaded_bytes": report.downloaded_bytes,
        "bundle": str(packed.bundle),
        "size": packed.size,
        "unpacked": packed.manifest.unpacked_size,
    }


def digest(bundle: Path) -> dict[str, object]:
    from lockbuild.trust import digest_signed_file

    t0 = time.perf_counter()
    d = digest_signed_file(bundle, prehash=False)
    return {"seconds": time.perf_counter() - t0, "size": d.size, "sha256": d.sha256}


def main(argv: list[str]) -> None:
    from bench.lbrun import report_self_rss

    atexit.register(report_self_rss)
    step, *args = argv
    if step == "raw":
        result = raw(Path(args[0]), Path(args[1]), int(args[2]))
    elif step == "fetch":
        result = fetch(Path(args[0]), Path(args[1]), int(args[2]), args[3] if len(args) > 3 else None)
    elif step == "pack":
        result = pack(Path(args[0]), Path(args[1]), Path(args[2]), Path(args[3]))
    elif step == "digest":
        result = digest(Path(args[0]))
    else:
        raise SystemExit(f"unknown step {step!r}; expected raw, fetch, pack or digest")
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
