"""A client for the Hugging Face Hub: one revision's files, with the sizes and hashes the Hub states.

The listing is the revision (``/api/models/{repo}/revision/{rev}?blobs=true``), whose ``sha`` must be
the commit asked for, and its recursive tree (``/api/models/{repo}/tree/{rev}?recursive=true``, every
``Link: rel="next"`` page followed, on the Hub's own origin only, a bounded number of times). Each
answer is read bounded and parsed strictly into ``HubFile``; a path that is not plain, a hash that is
not lowercase hex, a size that is not a count, or two answers that disagree are refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HubFile:
    """One file of a revision as the Hub lists it."""

    path: str  # repo path, POSIX: relative, no '..', no empty parts, no backslash, printable
    size: int
    blob_id: str  # the tree's "oid": the git blob sha1, 40 lowercase hex
    sha256: str | None  # the LFS sha256 (64 lowercase hex) for LFS files, else None

    @property
    def cache_name(self) -> str:
        """The file's name under ``blobs/`` in the Hub's cache: the sha256 for LFS files, else the blob id."""
        return self.sha256 if self.sha256 is not None else self.blob_id


@dataclass(frozen=True)
class HubRevision:
    repo: str  # "ORG/NAME"
    commit: str  # 40 hex, the revision's sha as the Hub states it (the one asked for)
    files: tuple[HubFile, ...]  # every file of the revision, sorted by path
