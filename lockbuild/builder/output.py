"""Writing a build's lock (and, for ``fetch``, its files) to OUT/VERSION-VARIANT, all or nothing; and the
lock as the commands show it (JSON, and its PEP 740 line)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from lockbuild import fsio
from lockbuild.builder.plan import Plan
from lockbuild.bundle.firstuse import FirstUse, first_use
from lockbuild.digest import CHUNK
from lockbuild.documents import JSON
from lockbuild.fetch.attestations import recorded
from lockbuild.lock import LockedFile
from lockbuild.provenance import RECORD, record_json
from lockbuild.times import iso

EXTRAS = "extras.txt"


def extras_text(plan: Plan) -> str:
    """The record of the files a bundle carries beside the locked packages (the uv wheel the node installs
    with, source archives, release assets, an interpreter), each with its sha256 and address. Not a
    requirements file: uv never reads it, so the uv wheel is recorded without entering the engine's
    environment."""
    lines = [
        "# lockbuild: files bundled beside the locked packages (not installed by uv from this file)",
        "# kind path sha256 url",
    ]
    lines += [f"{e.kind} {e.path} {e.sha256} {e.url}" for e in sorted(plan.extras, key=lambda e: e.path)]
    return "\n".join(lines) + "\n"


def provenance_text(plan: Plan) -> str:
    """provenance.json: each locked package's PEP 740 provenance as its index stated it (unverified), which
    the next lock of this build is compared with."""
    doc = record_json(plan.recipe.engine.name, plan.build.id, recorded(plan.lock.files))
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def _place(src: Path, dest: Path) -> None:
    """A cached file at ``dest``: a hard link where possible, else a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        with src.open("rb") as f, fsio.create_new(dest) as out:
            shutil.copyfileobj(f, out, CHUNK)


def write_plan_dir(plan: Plan, out: Path, fetched: Mapping[str, Path] | None = None) -> Path:
    """OUT/VERSION-VARIANT with the lock, extras.txt, provenance.json and the resolved recipe, and with
    ``fetched`` (sha256 → file) every file under its bundle path. Written under a temporary name and renamed
    at the end."""
    out.mkdir(parents=True, exist_ok=True)
    final = out / plan.build.id
    tmp = Path(tempfile.mkdtemp(prefix=f".{plan.build.id}.", suffix=".partial", dir=out))
    try:
        for name, text in (
            (plan.lock.filename, plan.lock.text),
            ("recipe.toml", plan.resolved_recipe),
            (EXTRAS, extras_text(plan)),
            (RECORD, provenance_text(plan)),
        ):
            fsio.write_new(tmp / name, text.encode("utf-8"))
        if fetched is not None:
            for f in plan.lock.files:
                _place(fetched[f.sha256], tmp / f.bundle_path)
            for e in plan.extras:
                _place(fetched[e.sha256], tmp / e.path)
        if final.exists():
            shutil.rmtree(final)
        tmp.replace(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def lock_json(plan: Plan) -> dict[str, JSON]:
    """A build's lock as ``lock`` and ``fetch`` show it under --json."""
    return {
        "engine": plan.recipe.engine.name,
        "build": plan.build.id,
        "as_of": iso(plan.as_of),
        "python": plan.build.python,
        "platform": plan.build.platform,
        "lock_format": plan.lock.format,
        "resolution_reused": plan.resolution_reused,
        "packages": [
            {
                "name": f.name,
                "version": f.version,
                "file": f.filename,
                "sha256": f.sha256,
                "size": f.size,
                "url": f.url,
                "origin": f.origin,
                "index": f.index,
                "time_from": f.time_from,
                "provenance": f.provenance.to_json() if f.provenance is not None else None,
            }
            for f in plan.lock.files
        ],
        "exclude_newer_package": {name: when or False for name, when in plan.build.exclude_newer_package},
        "extras": [{"path": e.path, "kind": e.kind, "sha256": e.sha256, "url": e.url} for e in plan.extras],
        "warnings": list(plan.warnings),
        "first_use": [u.to_json() for u in plan_first_use(plan)],
    }


def plan_first_use(plan: Plan) -> tuple[FirstUse, ...]:
    """What the locked environment would fetch at first use (firstuse.py), from the lock's packages."""
    files = [(f.name, f.version) for f in plan.lock.files]
    return first_use(files, dict(plan.recipe.engine.env), extra_files=bool(plan.build.extra_files))


def provenance_summary(files: Sequence[LockedFile], shown: int = 8) -> str:
    """The lock's PEP 740 line: the attested packages and their publishers as the index states them."""
    offered = [(f, f.provenance) for f in files if f.provenance is not None]
    if not offered:
        return f"\n  provenance (PEP 740): the index offers none for these {len(files)} packages (nothing recorded)"
    attested = sorted(((f, p) for f, p in offered if p.publishers), key=lambda fp: fp[0].name)
    head = (
        f"\n  provenance (PEP 740, as the index states it, unverified): {len(attested)} of {len(files)} "
        "packages attested"
    )
    listed = "".join(f"\n    {f.name} {f.version}: {p.describe()}" for f, p in attested[:shown])
    more = f"\n    ... and {len(attested) - shown} more (--json lists each)" if len(attested) > shown else ""
    return head + listed + more
