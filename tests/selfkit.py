"""What a test needs to build lockbuild's own bundle offline: lockbuild's dependencies as wheels, made
from the distributions installed in this venv (the files their RECORD lists, with their own WHEEL tags),
served by the suite's local index like any project's."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import io
import zipfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_LEFT_OUT = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")


def repack(name: str, scripts: tuple[str, ...] = ()) -> tuple[str, bytes]:
    """``(file name, bytes)`` of a wheel holding the installed distribution ``name``; the files in bin/
    named in ``scripts`` go back into the wheel's ``.data/scripts/`` (uv's binary)."""
    dist = md.distribution(name)
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    assert tags, f"{name} has no WHEEL tags"
    pys = sorted({t.split("-")[0] for t in tags})
    abis = sorted({t.split("-")[1] for t in tags})
    plats = sorted({t.split("-")[2] for t in tags})
    dist_name = dist.metadata["Name"].replace("-", "_")
    version = dist.version
    filename = f"{dist_name}-{version}-{'.'.join(pys)}-{'.'.join(abis)}-{'.'.join(plats)}.whl"
    info_dir = next(str(f).split("/")[0] for f in dist.files or () if str(f).endswith(".dist-info/METADATA"))
    entries: list[tuple[str, bytes]] = []
    for f in dist.files or ():
        rel = str(f)
        if rel.startswith("..") and rel.rsplit("/", 1)[-1] in scripts and "/bin/" in rel:
            entries.append((f"{dist_name}-{version}.data/scripts/{rel.rsplit('/', 1)[-1]}", f.locate().read_bytes()))
            continue
        if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        if rel.startswith(info_dir + "/") and rel.split("/", 1)[1] in _LEFT_OUT:
            continue
        entries.append((rel, f.locate().read_bytes()))
    entries.sort()
    record = ""
    for rel, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{rel},sha256={digest},{len(data)}\n"
    record += f"{info_dir}/RECORD,,\n"
    entries.append((f"{info_dir}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for rel, data in entries:
            zi = zipfile.ZipInfo(rel, (2024, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if ".data/scripts/" in rel else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename, buf.getvalue()


def runtime_closure(top: str = "lockbuild", leave_out: tuple[str, ...] = ("uv",)) -> list[str]:
    """The installed distributions ``top`` needs at run time (no extras), ``top`` and ``leave_out`` not included."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in md.requires(top) or ()]
    while todo:
        r = todo.pop()
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        n = canonicalize_name(r.name)
        if n in seen or n in leave_out:
            continue
        seen.add(n)
        todo += [Requirement(x) for x in md.requires(n) or ()]
    return sorted(seen)
