"""The build closure of a bundle's sdists: where its wheels live and the hashed lock the node
builds with (``uv build --build-constraints lock/build-requirements.txt --require-hashes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
