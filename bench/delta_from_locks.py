"""What a delta bundle of a real engine update would carry, from two `lockbuild lock --json` outputs.

A delta holds the members the base lacks, by sha256; wheels are already deflated and zstd gains little on
them, so the new files' sizes are the delta's size to within a few percent. This needs no download, only
the two locks (real PyPI):

    lockbuild lock vllm-0.10.2.toml --out /tmp/a --json > a.json
    lockbuild lock bundles/vllm.toml --build cu128 --out /tmp/b --json > b.json
    python -m bench.delta_from_locks a.json b.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def lock_files(path: Path) -> dict[str, tuple[str, int]]:
    """sha256 -> (file name, size) of every locked package file."""
    lock = json.loads(path.read_text(encoding="utf-8"))["locks"][0]
    return {p["sha256"]: (p["file"], int(p["size"])) for p in lock["packages"]}


def delta(base: dict[str, tuple[str, int]], new: dict[str, tuple[str, int]]) -> tuple[int, int, list[tuple[str, int]]]:
    """(full size, delta size, the new files largest first)."""
    added = sorted((new[h] for h in new if h not in base), key=lambda f: -f[1])
    return sum(s for _, s in new.values()), sum(s for _, s in added), added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="lock --json of the installed version")
    parser.add_argument("new", type=Path, help="lock --json of the update")
    args = parser.parse_args()
    new = lock_files(args.new)
    full, size, added = delta(lock_files(args.base), new)
    print(f"full: {full / 1e9:.2f} GB in {len(new)} files")
    print(f"delta: {size / 1e9:.3f} GB in {len(added)} files ({100 * size / full:.1f} % of the full bundle)")
    for name, n in added[:8]:
        print(f"  {n / 1e6:8.1f} MB  {name}")


if __name__ == "__main__":
    main()
