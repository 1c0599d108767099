"""Rendering results: the terminal table (also pasted into bench/README.md), the scaling table, the plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.suite import Results

PHASES = ("lock", "fetch", "pack", "verify", "install", "pipeline")


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:,.1f} MB"


def table(r: Results) -> str:
    f = r.facts
    lines = [
        f"## {r.label}: {f.get('packages', '?')} packages, {f.get('fetch_files', '?')} files fetched "
        f"({_mb(f.get('fetch_bytes', 0))}), bundle {_mb(f.get('bundle_bytes', 0))}, "
        f"{f.get('repeat', '?')} runs each",
        "",
        "| phase | variant | median s | min–max s | CPU s | MB/s | peak RSS MB | others busy |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in PHASES:
        for (p, _), fig in r.figures.items():
            if p != phase or not fig.seconds:
                continue
            rate = f"{fig.bytes / fig.median / 1e6:,.0f}" if fig.bytes else ""
            lines.append(
                f"| {phase} | {fig.variant} | {fig.median:.2f} | {min(fig.seconds):.2f}–{max(fig.seconds):.2f} "
                f"| {statistics.median(fig.cpu_s):.2f} | {rate} | {fig.peak_rss_mb:.0f} "
                f"| {statistics.median(fig.contention):.2f} |"
            )
    lines += ["", "| ratio (pair by pair) | median | min–max | target | |", "|---|---:|---:|---|---|"]
    for q in r.ratios:
        status = "" if q.target == "(none)" else ("met" if q.met else "**missed**")
        lines.append(f"| {q.name} | {q.median:.2f} | {min(q.values):.2f}–{max(q.values):.2f} | {q.target} | {status} |")
    warm = f.get("warm_rebuild")
    if warm:
        seen = (
            ""
            if warm["server_file_gets"] is None
            else f", {warm['server_file_gets']} file GETs ({warm['server_bytes']} bytes) seen by the index"
        )
        lines += ["", f"warm-cache rebuild: {warm['cached']}/{warm['files']} files from the cache, "
                      f"{warm['downloaded_bytes']} bytes downloaded{seen}"]  # fmt: skip
    return "\n".join(lines)


LB_STEPS = (
    ("lock", "lockbuild lock"),
    ("fetch", "lockbuild fetch (whole process)"),
    ("pack", "lockbuild pack + sign"),
    ("verify", "lockbuild verify (signature + every digest)"),
    ("install", "lockbuild install (verify + unpack + uv + checks)"),
    ("pipeline", "lockbuild build (cold cache)"),
)


def scaling_table(results: Sequence[Results]) -> str:
    head = "| lockbuild step | " + " | ".join(f"{_mb(r.facts.get('bundle_bytes', 0))} bundle" for r in results)
    lines = [head + " | RSS growth, smallest → largest |", "|---|" + "---:|" * (len(results) + 1)]
    for phase, variant in LB_STEPS:
        figs = [r.get(phase, variant) for r in results]
        if any(f is None for f in figs):
            continue
        cells = [f"{f.median:.2f} s, {f.peak_rss_mb:.0f} MB" for f in figs if f is not None]
        growth = figs[-1].peak_rss_mb - figs[0].peak_rss_mb  # type: ignore[union-attr]
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {growth:+.1f} MB |")
    return "\n".join(lines)


def rss_growth(results: Sequence[Results]) -> dict[str, float]:
    out: dict[str, float] = {}
    for phase, variant in LB_STEPS:
        a, b = results[0].get(phase, variant), results[-1].get(phase, variant)
        if a is not None and b is not None:
            out[variant] = round(b.peak_rss_mb - a.peak_rss_mb, 1)
    return out


BARS = (
    ("fetch", "lockbuild fetch (whole process)", "pip download --no-deps --require-hashes",
     "raw parallel GET (curl --parallel)"),
    ("pack", "lockbuild pack + sign", "tar czf", "tar cf - | zstd -T0 -3"),
    ("install", "lockbuild install (verify + unpack + uv + checks)", "venv + pip install --no-index --find-links",
     "uv venv + uv pip install --offline (floor)"),
    ("pipeline", "lockbuild: recipe -> installed", "classic: requirement -> installed", None),
)  # fmt: skip


def plot(results: Sequence[Results], path: Path) -> bool:
    """A PNG of time per phase (lockbuild, classic, floor) per workload, and peak RSS against size."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    scaling = len(results) > 1
    fig, axes = plt.subplots(1, 2 if scaling else 1, figsize=(13 if scaling else 8, 4.5), squeeze=False)
    ax = axes[0][0]
    r = results[-1]
    names = [b[0] for b in BARS]
    width = 0.27
    for k, (label, color) in enumerate((("lockbuild", "#1f77b4"), ("classic (pip, tar czf)", "#d62728"),
                                        ("floor (curl, tar|zstd, bare uv)", "#7f7f7f"))):  # fmt: skip
        vals = []
        for b in BARS:
            variant = b[1 + k]
            f = r.get(b[0], variant) if variant else None
            vals.append(f.median if f else 0.0)
        ax.bar([i + (k - 1) * width for i in range(len(BARS))], vals, width, label=label, color=color)
    ax.set_xticks(range(len(BARS)), names)
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"{r.label}: time per phase")
    ax.legend()
    if scaling:
        ax2 = axes[0][1]
        sizes = [x.facts.get("bundle_bytes", 0) / 1e9 for x in results]
        for _, variant in LB_STEPS:
            rss = [(f.peak_rss_mb if (f := x.get(*next(s for s in LB_STEPS if s[1] == variant))) else 0.0)
                   for x in results]  # fmt: skip
            ax2.plot(sizes, rss, marker="o", label=variant.split(" (")[0])
        ax2.set_xlabel("bundle size, GB")
        ax2.set_ylabel("peak RSS, MB")
        ax2.set_title("peak memory against bundle size")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
