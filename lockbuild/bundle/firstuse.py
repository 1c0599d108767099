"""What a locked environment fetches the first time it runs: the one table of known first-use downloads.

Each entry names a package whose behaviour is known, what it fetches at first use (and from where), and the
remedy on a node without network. Pure: given the lock's (name, version) pairs, :func:`first_use` says
which entries apply. ``lock``, ``inspect`` and ``lockbuild test`` all show what this module says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from lockbuild.documents import JSON

if TYPE_CHECKING:
    from lockbuild.bundle.manifest import Manifest


@dataclass(frozen=True)
class Known:
    """A package that fetches at first use, and the packages that carry what it fetches (if any)."""

    package: str  # canonical name of the package that fetches
    fetches: str  # what, and from where
    source: str  # where this behaviour is documented
    remedy: str  # what to do on a node without network
    carried_by: tuple[str, ...] = ()  # packages that, at exactly the package's version, carry it all
    variable: str = ""  # the environment variable that points the package at carried files, if any
    digests_in: str = ""  # the file of its wheel that publishes the expected sha256 of each file it fetches


KNOWN: tuple[Known, ...] = (
    Known(
        "flashinfer-python",
        "FlashInfer's kernels: the cubins from NVIDIA's artifact server (edge.urm.nvidia.com) at the first "
        "request, else a JIT compile with nvcc, which a node rarely has",
        "flashinfer-ai/flashinfer#2941, PrimeIntellect-ai/prime-rl#3251; FlashInfer's installation docs",
        "carry flashinfer-cubin and flashinfer-jit-cache of exactly the locked flashinfer-python version "
        "(flashinfer-jit-cache from https://flashinfer.ai/whl/cuXXX), or give the node nvcc and a writable "
        "cache for the JIT",
        carried_by=("flashinfer-cubin", "flashinfer-jit-cache"),
    ),
    Known(
        "tiktoken",
        "BPE encodings (o200k_base, cl100k_base, ...) from openaipublic.blob.core.windows.net at the first use "
        "of a tokenizer that needs one",
        "tiktoken/load.py and tiktoken_ext/openai_public.py (the URL and expected sha256 of each encoding)",
        "carry the encodings as extra-files and set TIKTOKEN_ENCODINGS_BASE (or TIKTOKEN_CACHE_DIR) in "
        '[engine.env], e.g. TIKTOKEN_ENCODINGS_BASE = "{prefix}/share/tiktoken"',
        variable="TIKTOKEN_ENCODINGS_BASE",
        digests_in="tiktoken_ext/openai_public.py",
    ),
    Known(
        "openai-harmony",
        "the o200k_harmony encoding (tiktoken's o200k_base) from openaipublic.blob.core.windows.net at the "
        "first load of the harmony encoding (gpt-oss models)",
        "vllm-project/vllm#22525; openai-harmony reads TIKTOKEN_ENCODINGS_BASE",
        "carry o200k_base.tiktoken as an extra-file and set TIKTOKEN_ENCODINGS_BASE in [engine.env]",
        variable="TIKTOKEN_ENCODINGS_BASE",
    ),
)
BY_NAME: Mapping[str, Known] = {k.package: k for k in KNOWN}


@dataclass(frozen=True)
class FirstUse:
    """A first-use download the locked environment would make, or what carries it."""

    package: str
    version: str
    fetches: str
    source: str
    remedy: str
    carried: bool  # the lock carries it (every carrying package at the exact version), nothing is fetched
    missing: tuple[str, ...] = ()  # carrying packages the lock lacks (or has at another version)

    def line(self) -> str:
        if self.carried:
            return f"{self.package} {self.version}: carried ({', '.join(BY_NAME[self.package].carried_by)})"
        lacking = f" ({', '.join(self.missing)} not carried at {self.version})" if self.missing else ""
        return f"{self.package} {self.version} fetches at first use {self.fetches}{lacking}; remedy: {self.remedy}"

    def to_json(self) -> dict[str, JSON]:
        return {
            "package": self.package,
            "version": self.version,
            "fetches": self.fetches,
            "source": self.source,
            "remedy": self.remedy,
            "carried": self.carried,
            "missing": list(self.missing),
        }


def _same(a: str, b: str) -> bool:
    """The same release, a local label (``+cu128``) aside."""
    try:
        return Version(a).public == Version(b).public
    except InvalidVersion:
        return a == b


def first_use(
    packages: Iterable[tuple[str, str]], env: Mapping[str, str] | None = None, *, extra_files: bool = False
) -> tuple[FirstUse, ...]:
    """The known first-use downloads of a lock holding ``packages`` ((name, version) pairs). An entry that
    reads a variable is carried when the recipe's ``[engine.env]`` (``env``) sets it and the build carries
    ``extra_files`` (the files it points at)."""
    locked: dict[str, str] = {str(canonicalize_name(n)): v for n, v in packages}
    out: list[FirstUse] = []
    for k in KNOWN:
        version = locked.get(k.package)
        if version is None:
            continue
        missing = tuple(c for c in k.carried_by if c not in locked or not _same(locked[c], version))
        carried = (bool(k.carried_by) and not missing) or bool(extra_files and k.variable and env and k.variable in env)
        out.append(FirstUse(k.package, version, k.fetches, k.source, k.remedy, carried, () if carried else missing))
    return tuple(out)


def follows(package: str) -> str | None:
    """The package whose exact version ``package`` must take (flashinfer-cubin follows flashinfer-python)."""
    name = canonicalize_name(package)
    return next((k.package for k in KNOWN if name in k.carried_by), None)


def packages_of(paths: Iterable[str]) -> list[tuple[str, str]]:
    """(name, version) of each wheel or sdist among a bundle's member paths (other paths are passed over)."""
    out: list[tuple[str, str]] = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        try:
            if name.endswith(".whl"):
                got = parse_wheel_filename(name)
                out.append((str(got[0]), str(got[1])))
            elif name.endswith((".tar.gz", ".zip")):
                sd = parse_sdist_filename(name)
                out.append((str(sd[0]), str(sd[1])))
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
    return out


def bundle_first_use(manifest: Manifest) -> tuple[FirstUse, ...]:
    """The known first-use downloads of a bundle's environment, from its wheels and sdists."""
    paths = (m.path for m in manifest.members if m.kind in ("wheel", "sdist"))
    return first_use(packages_of(paths), dict(manifest.install.env), extra_files=bool(manifest.install.extra_files))


# tiktoken_ext/openai_public.py: load_tiktoken_bpe("https://.../o200k_base.tiktoken", expected_hash="...")
_PUBLISHED = re.compile(r'"(?:https?://[^"\s]+/)?([^"/\s]+)",\s*expected_hash="([0-9a-f]{64})"')


def published_digests(source: str) -> dict[str, str]:
    """The file name -> sha256 pairs a package's source publishes for the files it fetches."""
    return dict(_PUBLISHED.findall(source))
