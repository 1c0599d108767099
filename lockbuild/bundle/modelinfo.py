"""A model bundle's part of the manifest: the ``[model]`` table (the Hub repo and commit) and, for every
file of kind ``model-file``, its repo path, git blob id and whether it is an LFS file.

A model bundle is a bundle like any other (one trust decision, one extraction, the store), format 4;
docs/bundle-format.md describes it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockbuild.bundle.installparse import parse_install
from lockbuild.bundle.instructions import FORMAT_5, InstallTable
from lockbuild.errors import IntegrityError

MODEL_FORMAT = 4
MODEL_DIR = "model/"
MODEL_KIND = "model-file"
MODEL_VARIANT = "hf"
MODEL_PYTHON = "none"
MODEL_PLATFORM = "any"
NO_LOCK = "none"
COMMIT = re.compile(r"[0-9a-f]{40}")
BLOB_ID = COMMIT  # a git blob sha1, as the Hub's tree gives a file's "oid"
# A Hub repo id ORG/NAME (huggingface_hub's validate_repo_id): letters, digits, '.', '_', '-', no '--' or
# '..', not starting or ending with '.' or '-'; the cache folder models--ORG--NAME is made from it.
_REPO_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
_MODEL_KEYS = ("repo", "commit")
# A model bundle's placeholder instructions: it has no [install] table, and the engine installer refuses it.
MODEL_INSTALL = InstallTable(binary="", verify=(), gpu_probe="none", uv="")
_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."


def repo_id(value: str) -> bool:
    """Whether ``value`` is ORG/NAME as the Hub spells a model repository id."""
    parts = value.split("/")
    return len(parts) == 2 and all(bool(_REPO_PART.fullmatch(p)) and "--" not in p and ".." not in p for p in parts)


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


@dataclass(frozen=True)
class ModelFile:
    member: str  # the member's path: model/<repo path>
    repo_path: str
    size: int
    sha256: str
    blob_id: str  # the git blob sha1 (the Hub tree's oid)
    lfs: bool  # an LFS file, whose blob in the cache is named by its sha256; others by their blob id

    @property
    def cache_name(self) -> str:
        """The name of its file under the Hub cache's blobs/."""
        return self.sha256 if self.lfs else self.blob_id


@dataclass(frozen=True)
class ModelTable:
    repo: str  # ORG/NAME
    commit: str  # 40 hex
    files: tuple[ModelFile, ...]

    @property
    def folder(self) -> str:
        """The repo's folder in the Hub cache, as huggingface_hub names it."""
        return "models--" + self.repo.replace("/", "--")

    def toml_lines(self, q: Callable[[str], str]) -> list[str]:
        return ["[model]", f"repo = {q(self.repo)}", f"commit = {q(self.commit)}", ""]

    def file_lines(self, member: str, q: Callable[[str], str]) -> list[str]:
        for f in self.files:
            if f.member == member:
                return [f"repo-path = {q(f.repo_path)}", f"blob-id = {q(f.blob_id)}", f"lfs = {str(f.lfs).lower()}"]
        return []

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "commit": self.commit,
            "files": [
                {"repo_path": f.repo_path, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id, "lfs": f.lfs}
                for f in self.files
            ],
        }

    def summary(self) -> list[str]:
        return [
            f"the model {self.repo} at {self.commit}, {len(self.files)} files, into a Hugging Face cache "
            "(install … --models DIR)"
        ]

    def file(self, repo_path: str) -> ModelFile | None:
        return next((f for f in self.files if f.repo_path == repo_path), None)


class _Member(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...
    @property
    def kind(self) -> str: ...


def parse_model(top: Mapping[str, Any], files: Sequence[Mapping[str, Any]], members: Sequence[_Member]) -> ModelTable:
    """The [model] table and the model keys of each [[files]] entry, strictly: the version is the commit,
    the variant and target a model's; every member but the recipe is a model file under model/, its repo
    path the member's path without model/."""
    data = top.get("model")
    if not isinstance(data, dict):
        raise _bad(f"the manifest is format {MODEL_FORMAT} but has no [model] table.")
    unknown = sorted(set(data) - set(_MODEL_KEYS))
    if unknown:
        raise _bad(f"the manifest's [model] table has the unknown key(s) {', '.join(unknown)[:80]}.")
    repo, commit = data.get("repo"), data.get("commit")
    if not isinstance(repo, str) or not repo_id(repo):
        raise _bad(f"the manifest's model.repo {str(repo)[:80]!r} is not a Hub repo id ORG/NAME.")
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise _bad(f"the manifest's model.commit {str(commit)[:80]!r} is not a 40-hex commit.")
    target = top.get("target")
    shape = (
        top.get("version"),
        top.get("variant"),
        top.get("lock-format"),
        target.get("python") if isinstance(target, dict) else None,
        target.get("platform") if isinstance(target, dict) else None,
    )
    if shape != (commit, MODEL_VARIANT, NO_LOCK, MODEL_PYTHON, MODEL_PLATFORM):
        raise _bad(
            f"the model bundle's version, variant, lock-format and target are {shape!r}; expected "
            f"{(commit, MODEL_VARIANT, NO_LOCK, MODEL_PYTHON, MODEL_PLATFORM)!r}."
        )
    out: list[ModelFile] = []
    for f, m in zip(files, members, strict=True):
        if m.kind == "recipe":
            continue
        if m.kind != MODEL_KIND or not m.path.startswith(MODEL_DIR):
            raise _bad(
                f"the model bundle's member {m.path[:80]!r} (kind {m.kind}) is not a {MODEL_KIND} under "
                f"{MODEL_DIR}; a model bundle holds only its recipe and the model's files."
            )
        repo_path, blob_id, lfs = f.get("repo-path"), f.get("blob-id"), f.get("lfs")
        if repo_path != m.path[len(MODEL_DIR) :]:
            raise _bad(f"the manifest's repo-path for {m.path[:80]!r} is not its path without {MODEL_DIR}.")
        if not isinstance(blob_id, str) or not BLOB_ID.fullmatch(blob_id):
            raise _bad(f"the manifest's blob-id for {m.path[:80]!r} is not a git blob id (40 lower-case hex).")
        if not isinstance(lfs, bool):
            raise _bad(f"the manifest's lfs for {m.path[:80]!r} is not true or false.")
        out.append(ModelFile(m.path, repo_path, m.size, m.sha256, blob_id, lfs))
    if not out:
        raise _bad("the model bundle lists no model files.")
    return ModelTable(repo, commit, tuple(out))


def check_no_model_files(members: Sequence[_Member]) -> None:
    """An engine bundle carries no model files (the node would have nowhere to put them)."""
    for m in members:
        if m.kind == MODEL_KIND:
            raise _bad(
                f"the manifest lists the {MODEL_KIND} {m.path[:80]!r} but is not a model bundle (format "
                f"{MODEL_FORMAT} with a [model] table)."
            )


def instructions(
    top: Mapping[str, Any], fmt: int, files: Sequence[Mapping[str, Any]], members: Sequence[_Member]
) -> tuple[ModelTable | None, InstallTable]:
    """What a manifest tells the node: a model bundle's (format 4) [model] table and no [install] table;
    any other format's [install] table, with no [model] table and no model file."""
    if fmt == MODEL_FORMAT or (fmt == FORMAT_5 and "model" in top):  # format 5: models too, by their table
        if "install" in top:
            raise _bad("the manifest is a model bundle's (format 4) but has an [install] table; it is malformed.")
        return parse_model(top, files, members), MODEL_INSTALL
    if "model" in top:
        raise _bad(f"the manifest has a [model] table but is format {fmt}; a model bundle is format {MODEL_FORMAT}.")
    check_no_model_files(members)
    return None, parse_install(top.get("install"), {m.path: m.kind for m in members})
