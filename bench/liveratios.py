"""The real workload's variants, named once, and the ratios of one run (``bench/run --workload vllm-live``):
each pair is run i against run i, with the target the README states where there is one."""

from __future__ import annotations

from collections.abc import Callable

from bench.measure import Figure, Ratio
from bench.suite import Results

# the variants, named once (the ratios and the README refer to them)
LB_LOCK, UV_LOCK = "lockbuild lock", "uv pip compile (same flags)"
LB_RELOCK = "lockbuild lock, warm cache (uv's resolution reused, every pin checked on the index)"
RAW = "raw parallel download (curl --parallel, 8)"
COLD, WARM = "lockbuild build, cold cache", "lockbuild build, warm cache"
ZSTD = "tar cf - | zstd -T0 -3 (same files)"
# The cold build's floors, run after each cold build on the same files: the transfer floor (resolve, then
# download, nothing else) and the same work done by stock tools one after another (the stock pipeline).
ST_UV, ST_CURL = "stock: uv pip compile (cold uv cache)", "stock: curl --parallel of every file"
ST_SUM, ST_ZSTD, ST_SIGN = "stock: sha256sum -c of each", "stock: tar cf - | zstd -T0 -3", "stock: minisign -S"
TRANSFER = "transfer floor: uv pip compile + curl --parallel"
STOCK = "stock pipeline: uv pip compile + curl + sha256sum + tar | zstd + minisign -S"
VERIFY, B2SUM, SHA256SUM = "lockbuild verify (signature + every digest)", "b2sum (BLAKE2b-512)", "sha256sum"
OPENSSL = "openssl dgst -sha256 (one sha256 pass, SHA-NI)"
INSTALL = "lockbuild install (offline)"
UV_INSTALL = "uv venv + uv pip install --offline + the verify command (floor)"
UV_BARE = "uv venv + uv pip install --offline, no hashes, no verify command (bare)"
INSTALL_STORE = "lockbuild install --store (offline, blobs linked)"
IMPORT, IMPORT_FLOOR = "lockbuild import (a new store)", "one sha256 pass + a copy (openssl dgst; cp)"
PUSH, PULL = "lockbuild push (local registry, empty)", "lockbuild pull (a new store)"
RAW_PULL = "raw parallel fetch of the same blobs (curl --parallel 8) + openssl sha256"
CL_DL, CL_TGZ, CL_INST = "classic: pip download", "classic: tar czf", "classic: venv + pip install --no-index"


def ratios(r: Results) -> list[Ratio]:
    out: list[Ratio] = []

    def med(phase: str, variant: str) -> Figure | None:
        return r.get(phase, variant)

    def add(name: str, values: tuple[float, ...], target: str, ok: Callable[[float], bool]) -> None:
        if values:
            out.append(Ratio(name, values, target, ok(sorted(values)[len(values) // 2])))

    lb, uv = med("lock", LB_LOCK), med("lock", UV_LOCK)
    if lb and uv:
        add(
            "lock / uv pip compile",
            tuple(a / b for a, b in zip(lb.seconds, uv.seconds, strict=False)),
            "<= 1.3",
            lambda v: v <= 1.3,
        )

    def pair(name: str, a: Figure | None, b: Figure | None, target: float | None, cpu: bool = False) -> None:
        """a / b, run i against run i; with a target, whether the median meets it."""
        if a and b:
            xs, ys = (a.cpu_s, b.cpu_s) if cpu else (a.seconds, b.seconds)
            add(
                name + (" (CPU-s)" if cpu else ""),
                tuple(x / max(y, 1e-9) for x, y in zip(xs, ys, strict=False)),
                f"<= {target}" if target is not None else "(none)",
                (lambda v: v <= target) if target is not None else (lambda v: True),
            )

    pair("lock, warm cache (a rebuild's lock) / uv pip compile (cold)", med("lock", LB_RELOCK), uv, 1.0)
    cold, raw, zstd, warm = med("build", COLD), med("fetch", RAW), med("build", ZSTD), med("build", WARM)
    transfer, stock = med("build", TRANSFER), med("build", STOCK)
    pair("build cold / transfer floor (uv pip compile + curl --parallel)", cold, transfer, 1.25)
    pair("build cold / transfer floor (uv pip compile + curl --parallel)", cold, transfer, None, cpu=True)
    pair("build cold / stock pipeline (uv + curl + sha256sum + tar|zstd + minisign)", cold, stock, 0.8)
    pair("build cold / stock pipeline (uv + curl + sha256sum + tar|zstd + minisign)", cold, stock, None, cpu=True)
    if cold:
        add("build, cold cache: seconds", tuple(cold.seconds), "(none)", lambda v: True)
        if raw and zstd:
            floor = max(raw.median, zstd.median)
            add(
                "build cold / max(raw download, tar|zstd)",
                tuple(s / floor for s in cold.seconds),
                "(none)",
                lambda v: True,
            )
    if warm:
        add("build, warm cache: seconds", tuple(warm.seconds), "(none)", lambda v: True)
        pair("build warm / tar|zstd", warm, zstd, None)
    v = med("verify", VERIFY)
    if v:
        add("verify, MB/s of bundle", tuple(v.bytes / s / 1e6 for s in v.seconds), "(none)", lambda x: True)
    # one read: the signature, then every frame against the signed table
    pair("verify / one sha256 pass (openssl dgst -sha256)", v, med("verify", OPENSSL), 1.0)
    inst, floor_i, bare = med("install", INSTALL), med("install", UV_INSTALL), med("install", UV_BARE)
    if inst:
        add("install (offline): seconds", tuple(inst.seconds), "(none)", lambda x: True)
    pair(
        "install / uv alone (uv venv + uv pip install --offline of the hashed lock + the verify command)",
        inst,
        floor_i,
        1.1,
    )
    pair("install / bare uv (no hashes, no verify command)", inst, bare, None)
    st, floor_s = med("install-store", INSTALL_STORE), med("install-store", UV_INSTALL)
    pair("install --store / uv alone (the same floor)", st, floor_s, 1.0)
    for phase, mine, base, name in (
        ("import", IMPORT, IMPORT_FLOOR, "import / (one sha256 pass + a copy)"),
        ("push-pull", PUSH, RAW_PULL, "push / raw parallel fetch + sha256"),
        ("push-pull", PULL, RAW_PULL, "pull / raw parallel fetch + sha256"),
    ):
        a, b = med(phase, mine), med(phase, base)
        if a and b:
            add(name, tuple(x / y for x, y in zip(a.seconds, b.seconds, strict=False)), "(none)", lambda x: True)
    classic = [med("classic", v) for v in (CL_DL, CL_TGZ, CL_INST)]
    if cold and inst and all(classic):
        ours = cold.median + inst.median
        theirs = sum(f.median for f in classic if f is not None)
        add(
            "classic / lockbuild, index -> installed (pip download + tar czf + pip install vs build + install)",
            (theirs / ours,),
            "(none)",
            lambda x: True,
        )
    own = [f.self_rss_mb for f in r.figures.values() if f.self_rss_kb and f.variant.startswith("lockbuild")]
    if own:
        add("lockbuild's own peak RSS, MB (largest step)", (max(own),), "<= 150", lambda x: x <= 150)
    from bench import push as push_phase

    out += push_phase.ratios(r.get)
    return out
