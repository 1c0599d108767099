"""A thin client for GitHub's release API: each asset with the digest GitHub publishes for it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from lockbuild.digest import SHA256_HEX
from lockbuild.errors import IntegrityError, RecipeError, RemoteError
from lockbuild.fetch.fetcher import Wanted
from lockbuild.fetch.http import get_json
from lockbuild.fetch.index import has_control_character
from lockbuild.recipe.checks import git_tag, github_repo

_DIGEST = re.compile(rf"sha256:({SHA256_HEX.pattern})")
_BAD_NAME = re.compile(r"[/\\\x00-\x20\x7f]")  # an asset name is one plain file name


@dataclass(frozen=True)
class ReleaseAsset:
    repo: str
    tag: str
    name: str
    size: int | None
    digest: str | None  # the published "sha256:..." exactly as given, or None
    download: str = "https://github.com"  # the download base (settings.github_download)

    @property
    def url(self) -> str:
        return f"{self.download}/{self.repo}/releases/download/{self.tag}/{self.name}"

    def sha256(self) -> str:
        """The published sha256; an asset without a well-formed one is refused, never used unchecked."""
        if self.digest is None:
            raise IntegrityError(
                f"{self.repo} {self.tag}: GitHub publishes no digest for {self.name}, so it cannot be verified; "
                "refused.",
                tip="Ask the publisher to re-upload the asset (GitHub records digests for uploads since 2025), "
                "or ship it as a source archive pinned by sha256 in the recipe.",
            )
        m = _DIGEST.fullmatch(self.digest)
        if m is None:
            raise IntegrityError(
                f"{self.repo} {self.tag}: the digest published for {self.name} is malformed: expected "
                f"'sha256:' and 64 hex digits, found {self.digest[:90]!r}; refused."
            )
        return m[1]

    def wanted(self) -> Wanted:
        # The token, when there is one, is added by the client for the download host only.
        return Wanted(self.url, self.sha256(), self.size, f"{self.repo} {self.tag} {self.name}")


def release_assets(client: httpx.Client, repo: str, tag: str, *, api: str, download: str) -> dict[str, ReleaseAsset]:
    """The assets of release ``tag``; ``api`` and ``download`` are the bases from the settings.

    ``repo`` and ``tag`` become part of the URL: a tag that is not a Git ref name (``../../other/repo``)
    is refused here too, not only when the recipe is parsed."""
    if not github_repo(repo) or not git_tag(tag):
        raise RecipeError(
            f"expected a GitHub OWNER/NAME and a release tag that is a Git ref name, found {repo[:90]!r} and "
            f"{tag[:90]!r}; refused."
        )
    data, _ = get_json(
        client,
        f"{api}/repos/{repo}/releases/tags/{tag}",
        what=f"asking GitHub for {repo} {tag}",
        headers={"Accept": "application/vnd.github+json"},
        not_found=f"GitHub has no release {tag} in {repo}.",
    )
    assets = data.get("assets") if isinstance(data, dict) else None
    if not isinstance(assets, list):
        raise RemoteError(f"GitHub's answer for {repo} {tag} has no assets list.")
    out: dict[str, ReleaseAsset] = {}
    for a in assets:
        if not isinstance(a, dict) or not isinstance(a.get("name"), str):
            raise RemoteError(f"GitHub's answer for {repo} {tag} lists an asset without a name.")
        if a["name"] in ("", ".", "..") or _BAD_NAME.search(a["name"]) or has_control_character(a["name"]):
            raise RemoteError(
                f"GitHub's answer for {repo} {tag} lists an asset named {a['name'][:90]!r}; expected a plain file "
                "name (no slashes, spaces or control characters)."
            )
        size = a.get("size")
        digest = a.get("digest")
        out[a["name"]] = ReleaseAsset(
            repo,
            tag,
            a["name"],
            size if isinstance(size, int) and not isinstance(size, bool) else None,
            digest if isinstance(digest, str) else None,
            download,
        )
    return out


def pick_wheel(assets: dict[str, ReleaseAsset], prefix: str, suffix: str, *, repo: str, tag: str) -> ReleaseAsset:
    found = sorted(n for n in assets if n.startswith(prefix) and n.endswith(suffix))
    if len(found) != 1:
        listing = ", ".join(found) if found else f"none; the release has {', '.join(sorted(assets)) or 'no assets'}"
        raise RemoteError(
            f"{repo} {tag}: expected exactly one asset named {prefix}…{suffix}, found {len(found)} ({listing}).",
            tip="Make the wheel's prefix and suffix in the recipe specific enough to match one file.",
        )
    return assets[found[0]]
