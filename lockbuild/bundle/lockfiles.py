"""The locks a bundle carries for the installer: ``lock/requirements.txt`` (each package pinned to the one
bundled file's sha256) and, for a build with extra indexes, ``lock/pylock.toml`` (PEP 751), each naming the
bundled files, where each came from and how the cut-off held it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from lockbuild.lock import LockedFile
from lockbuild.target import Target


def bundle_requirements(files: Sequence[LockedFile], exempt: Sequence[tuple[str, str | None]] = ()) -> str:
    """The lock the installer uses: each package pinned to the one bundled file's sha256; the recipe's
    per-package cut-offs (``exclude-newer-package``) recorded in a comment, as the manifest records them."""
    lines = ["# Installed by lockbuild with: uv pip install --offline --no-index --require-hashes"]
    lines.append("#   --find-links wheels --find-links sdists -r lock/requirements.txt")
    for name, when in exempt:
        lines.append(f"# exclude-newer-package: {name} = {when or 'false (no cut-off)'}")
    for f in sorted(files, key=lambda f: f.name):
        lines.append(f"{f.name}=={f.version} \\\n    --hash=sha256:{f.sha256}")
        lines.append(f"    # {f.bundle_path}{_provenance(f)}")
    return "\n".join(lines) + "\n"


def bundle_pylock(files: Sequence[LockedFile], target: Target) -> str:
    """A PEP 751 lock of the bundled files, each a path relative to lock/."""
    q = json.dumps
    out = [
        'lock-version = "1.0"',
        'created-by = "lockbuild"',
        f"requires-python = {q('==' + target.python + '.*')}",
        "",
    ]
    for f in sorted(files, key=lambda f: f.name):
        out.append("[[packages]]")
        out.append(f"name = {q(f.name)}")
        if f.version:
            out.append(f"version = {q(f.version)}")
        size = f"size = {f.size}, " if f.size is not None else ""
        path = q("../" + f.bundle_path)
        entry = f"{{ name = {q(f.filename)}, path = {path}, {size}hashes = {{ sha256 = {q(f.sha256)} }} }}"
        if f.kind == "wheel":
            out.append(f"wheels = [{entry}]")
        else:
            out.append(f"sdist = {entry}")
        out.append("")
        # Which index served the file, and whether the cut-off held it by its upload time (PEP 751 [tool]).
        out.append("[packages.tool.lockbuild]")
        out.append(f"index = {q(f.index)}")
        out.append(f"time-from = {q(f.time_from)}")
        out.append("")
    return "\n".join(out)


def _provenance(f: LockedFile) -> str:
    where = f"index {f.index}" if f.index else "the recipe's URL"
    published = ""
    if f.provenance is not None and f.provenance.publishers:  # PEP 740, as the index states it (unverified)
        published = f"; published by {f.provenance.describe()}, unverified"
    return f" (from {where}; time: {f.time_from}{published})"


BUILD_LOCK = "lock/build-requirements.txt"
BUILD_DIR = "build-deps"
KIND = "build-dep"


class _Dep(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def filename(self) -> str: ...


class _Built(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def sdist(self) -> str: ...
    @property
    def sha256(self) -> str: ...


def build_lock_text(
    deps: Sequence[_Dep], requires: Sequence[tuple[str, tuple[str, ...]]], built: Sequence[_Built] = ()
) -> str:
    """Each build dependency pinned to its one bundled file's sha256; each sdist's own build
    requirements recorded in comments (what the builder read from its pyproject.toml), and each wheel
    the builder made from an sdist with these dependencies."""
    lines = [
        "# Build dependencies of this bundle's sdists, for:",
        f"#   uv build --wheel --offline --no-index --find-links {BUILD_DIR} --build-constraints {BUILD_LOCK} "
        "--require-hashes SDIST",
    ]
    lines += [f"# {sdist} requires: {', '.join(reqs) or 'nothing'}" for sdist, reqs in requires]
    lines += [
        f"# {b.path} (sha256 {b.sha256}) was built on the builder from sdists/{b.sdist} with these" for b in built
    ]
    for d in sorted(deps, key=lambda d: d.name):
        lines.append(f"{d.name}=={d.version} \\\n    --hash=sha256:{d.sha256}")
        lines.append(f"    # {BUILD_DIR}/{d.filename}")
    return "\n".join(lines) + "\n"
