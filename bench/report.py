"""Rendering results: the terminal table (also pasted into bench/README.md), the scaling table, the plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.suite import Results

PHASES = (
    "lock",
    "fetch",
    "build",
    "pack",
    "verify",
    "install",
    "install-store",
    "import",
    "push-pull",
    "push",
    "classic",
    "pipeline",
    "floor",
    "verify-pass",
)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:,.1f} MB"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe inside a Markdown table cell


def table(r: Results) -> str:
    f = r.facts
    lines = [
        f"## {r.label}: {f.get('packages', '?')} packages, {f.get('fetch_files', '?')} files fetched "
        f"({_mb(f.get('fetch_bytes', 0))}), bundle {_mb(f.get('bundle_bytes', 0))}, "
        f"{f.get('repeat', '?')} runs each",
        "",
        "| phase | variant | median s | min–max s | CPU s | MB/s | peak RSS MB | own RSS MB | others busy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in PHASES:
        for (p, _), fig in r.figures.items():
            if p != phase or not fig.seconds:
                continue
            rate = f"{fig.bytes / fig.median / 1e6:,.0f}" if fig.bytes else ""
            lines.append(
                f"| {phase} | {_cell(fig.variant)} | {fig.median:.2f} | {min(fig.seconds):.2f}–{max(fig.seconds):.2f} "
                f"| {statistics.median(fig.cpu_s):.2f} | {rate} | {fig.peak_rss_mb:.0f} "
                f"| {f'{fig.self_rss_mb:.0f}' if fig.self_rss_mb else ''} "
                f"| {statistics.median(fig.contention):.2f} |"
            )
    lines += ["", "| ratio (pair by pair) | median | min–max | target | |", "|---|---:|---:|---|---|"]
    for q in r.ratios:
        status = "" if q.target == "(none)" else ("met" if q.met else "**missed**")
        spread = f"{min(q.values):.2f}–{max(q.values):.2f}"
        lines.append(f"| {_cell(q.name)} | {q.median:.2f} | {spread} | {q.target} | {status} |")
    warm = f.get("warm_rebuild")
    if warm:
        seen = (
            ""
            if warm["server_file_gets"] is None
            else f", {warm['server_file_gets']} file GETs ({warm['server_bytes']} bytes) seen by the index"
        )
        lines += [
            "",
            f"warm-cache rebuild: {warm['cached']}/{warm['files']} files from the cache, "
            f"{warm['downloaded_bytes']} bytes downloaded{seen}",
        ]
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
    """Per lockbuild step and bundle size: median time, the lockbuild process's peak RSS and, in brackets,
    the peak of the whole process tree (uv included); then the growth of both from smallest to largest."""
    head = "| lockbuild step | " + " | ".join(f"{_mb(r.facts.get('bundle_bytes', 0))} bundle" for r in results)
    lines = [head + " | RSS growth: process (tree) |", "|---|" + "---:|" * (len(results) + 1)]
    growth = rss_growth(results)
    for phase, variant in LB_STEPS:
        figs = [f for f in (r.get(phase, variant) for r in results) if f is not None]
        if len(figs) != len(results):
            continue
        cells = [f"{f.median:.2f} s, {f.self_rss_mb:.0f} MB ({f.peak_rss_mb:.0f})" for f in figs]
        g = growth[variant]
        lines.append(f"| {_cell(variant)} | " + " | ".join(cells) + f" | {g['process']:+.1f} MB ({g['tree']:+.1f}) |")
    return "\n".join(lines)


def rss_growth(results: Sequence[Results]) -> dict[str, dict[str, float]]:
    """Peak RSS growth of each lockbuild step from the smallest bundle to the largest, in MB."""
    out: dict[str, dict[str, float]] = {}
    for phase, variant in LB_STEPS:
        a, b = results[0].get(phase, variant), results[-1].get(phase, variant)
        if a is not None and b is not None:
            out[variant] = {
                "process": round(b.self_rss_mb - a.self_rss_mb, 1),
                "tree": round(b.peak_rss_mb - a.peak_rss_mb, 1),
            }
    return out


BARS = (
    (
        "fetch",
        "lockbuild fetch (whole process)",
        "pip download --no-deps --require-hashes",
        "raw parallel GET (curl --parallel)",
    ),
    ("pack", "lockbuild pack + sign", "tar czf", "tar cf - | zstd -T0 -3"),
    (
        "install",
        "lockbuild install (verify + unpack + uv + checks)",
        "venv + pip install --no-index --find-links",
        "uv venv + uv pip install --offline, hashed lock + verify command (floor)",
    ),
    ("pipeline", "lockbuild: recipe -> installed", "classic: requirement -> installed", None),
)


def _bars(ax: Any, r: Results) -> None:
    width = 0.27
    for k, (label, color) in enumerate(
        (
            ("lockbuild", "#1f77b4"),
            ("classic (pip, tar czf)", "#d62728"),
            ("floor (curl, tar|zstd, bare uv)", "#7f7f7f"),
        )
    ):
        vals = []
        for b in BARS:
            variant = b[1 + k]
            f = r.get(b[0], variant) if variant else None
            vals.append(f.median if f else 0.0)
        ax.bar([i + (k - 1) * width for i in range(len(BARS))], vals, width, label=label, color=color)
    ax.set_xticks(range(len(BARS)), [b[0] for b in BARS])
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"{r.label}: time per phase")
    ax.legend()


def _sum(r: Results, parts: Sequence[tuple[str, str]]) -> float | None:
    """The sum of several measured medians (a floor made of steps), or None when one was not measured."""
    figs = [r.get(*p) for p in parts]
    return sum(f.median for f in figs if f is not None) if parts and all(figs) else None


def live_groups(r: Results) -> list[tuple[str, float, float | None, float | None, float | None]]:
    """vllm-live's bars: (step, lockbuild, floor, classic path, target) for every step lockbuild was
    measured in; a floor or classic path that was not measured in the run is None (left out, never 0)."""
    from bench import vllm_live as v

    def med(phase: str, variant: str) -> float | None:
        f = r.get(phase, variant)
        return f.median if f is not None else None

    steps = (
        ("lock", [("lock", v.LB_LOCK)], [("lock", v.UV_LOCK)], None, None),
        ("build cold", [("build", v.COLD)], [("lock", v.UV_LOCK), ("fetch", v.RAW)], None, 75.0),
        ("build warm", [("build", v.WARM)], [("build", v.ZSTD)], None, 20.0),
        ("verify", [("verify", v.VERIFY)], [("verify", v.OPENSSL)], None, None),
        ("install", [("install", v.INSTALL)], [("install", v.UV_INSTALL)], None, 55.0),
        ("install --store", [("install-store", v.INSTALL_STORE)], [("install-store", v.UV_INSTALL)], None, None),
        ("import", [("import", v.IMPORT)], [("import", v.IMPORT_FLOOR)], None, None),
        ("push", [("push-pull", v.PUSH)], [("push-pull", v.RAW_PULL)], None, None),
        ("pull", [("push-pull", v.PULL)], [("push-pull", v.RAW_PULL)], None, None),
        (
            "index to installed",
            [("build", v.COLD), ("install", v.INSTALL)],
            [],
            [("classic", v.CL_DL), ("classic", v.CL_TGZ), ("classic", v.CL_INST)],
            None,
        ),
    )
    out = []
    for name, lb, floor, classic, target in steps:
        got = _sum(r, lb)
        if got is None or (classic is not None and _sum(r, classic) is None):
            continue  # not measured in this run (or nothing to compare it with): absent, not an empty bar
        out.append((name, got, _sum(r, floor), _sum(r, classic or []), target))
    return out


def _live_bars(ax: Any, r: Results) -> None:
    """vllm-live: each measured lockbuild step beside its floor (and the classic path where it ran), with
    the issue's target as a tick; what the run did not measure is left out."""
    groups = live_groups(r)
    width = 0.27
    seen: set[str] = set()

    def bar(x: float, value: float | None, color: str, label: str) -> None:
        if value is None:
            return
        ax.bar(x, value, width, color=color, label=None if label in seen else label)
        seen.add(label)

    for i, (_, lb, floor, classic, target) in enumerate(groups):
        bar(i - width, lb, "#1f77b4", "lockbuild")
        bar(i, floor, "#7f7f7f", "floor (uv compile, curl, tar|zstd, openssl, bare uv)")
        bar(i + width, classic, "#d62728", "classic path (pip download + tar czf + pip install)")
        if target is not None:
            ax.hlines(
                target, i - 1.5 * width, i + 1.5 * width, colors="#2ca02c", label=None if "target" in seen else "target"
            )
            seen.add("target")
    ax.set_xticks(range(len(groups)), [g[0] for g in groups])
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"{r.label}: lockbuild against its floors and the classic path")
    ax.legend(fontsize=8)


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
    if scaling:
        sizes = [x.facts.get("bundle_bytes", 0) / 1e9 for x in results]
        ax_t, ax_m = axes[0][0], axes[0][1]
        for phase, variant in LB_STEPS:
            figs = [x.get(phase, variant) for x in results]
            label = variant.split(" (")[0]
            ax_t.plot(sizes, [f.median if f else 0.0 for f in figs], marker="o", label=label)
            ax_m.plot(sizes, [f.self_rss_mb if f else 0.0 for f in figs], marker="o", label=label)
        ax_t.set(xlabel="bundle size, GB", ylabel="seconds (median)", title="time against bundle size")
        ax_m.set(
            xlabel="bundle size, GB",
            ylabel="peak RSS of the lockbuild process, MB",
            title="peak memory against bundle size",
            ylim=(0, None),
        )
        ax_t.legend(fontsize=8)
        ax_m.legend(fontsize=8)
    elif results[-1].label.startswith("vllm-live"):
        _live_bars(axes[0][0], results[-1])
    else:
        _bars(axes[0][0], results[-1])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _span(values: Sequence[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def site_readme_table(runs: Sequence[Results]) -> str:
    """The README's performance section from vllm-live runs: each step beside its floors (median and range
    of wall seconds, CPU seconds, peak RSS), then every target as a ratio, pair by pair. A figure is taken
    from the last run that measured it (the runs may each hold some phases)."""
    from bench import push as p
    from bench import vllm_live as v

    rows = (
        ("lock", v.LB_LOCK, "lock (cold cache)"),
        ("lock", v.LB_RELOCK, "a rebuild's lock (kept cache)"),
        ("lock", v.UV_LOCK, "floor: `uv pip compile`, cold"),
        ("build", v.COLD, "build, cold cache"),
        ("build", v.TRANSFER, "floor: `uv pip compile` + `curl --parallel`"),
        ("build", v.STOCK, "floor: the stock pipeline (uv + curl + sha256sum + tar | zstd + minisign)"),
        (p.PHASE, p.PUSH_STORE, "push --store"),
        (p.PHASE, p.PUSH_LBZ, "push .lbz"),
        (p.PHASE, p.RAW_PUSH, "floor: curl POST + PUT per blob, 4 at a time"),
        ("verify", v.VERIFY, "verify"),
        ("verify", v.OPENSSL, "floor: `openssl dgst -sha256`"),
        ("install", v.INSTALL, "install from the `.lbz`"),
        ("install", v.UV_INSTALL, "floor: uv alone (hashed lock, offline) + the verify command"),
        ("install", v.UV_BARE, "bare uv (no hashes, no verify command)"),
        ("install-store", v.INSTALL_STORE, "install --store (blobs linked)"),
        ("install-store", v.UV_INSTALL, "floor: uv alone, the same"),
    )
    lines = [
        "| step | wall s, median (range) | CPU s | peak RSS MB (own) |",
        "|---|---:|---:|---:|",
    ]
    for phase, variant, name in rows:
        f = next((x.get(phase, variant) for x in reversed(runs) if x.get(phase, variant) is not None), None)
        if f is None:
            continue
        own = f" ({f.self_rss_mb:.0f})" if f.self_rss_mb >= 1 else ""
        lines.append(
            f"| {_cell(name)} | {_span(f.seconds, '{:.1f}')} | {statistics.median(f.cpu_s):.1f} "
            f"| {f.peak_rss_mb:.0f}{own} |"
        )
    lines += ["", "| target | ratio, median (range) | |", "|---|---:|---|"]
    seen: set[str] = set()
    for r in reversed(runs):
        for ratio in v.ratios(r):
            if ratio.target == "(none)" and "CPU" not in ratio.name and "bare uv" not in ratio.name:
                continue
            if ratio.name in seen or ": seconds" in ratio.name or "MB/s" in ratio.name:
                continue
            seen.add(ratio.name)
            verdict = "" if ratio.target == "(none)" else ("met" if ratio.met else "**missed**")
            target = "" if ratio.target == "(none)" else " " + ratio.target.replace("<=", "≤")
            unit = "" if "MB" in ratio.name else "×"
            lines.append(f"| {_cell(ratio.name)}{target} | {_span(ratio.values, '{:.2f}')}{unit} | {verdict} |")
    return "\n".join(lines)
