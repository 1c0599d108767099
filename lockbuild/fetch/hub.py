"""A client for the Hugging Face Hub: one revision's files, with the sizes and hashes the Hub states.

The revision's ``sha`` must be the commit asked for (its ``lastModified`` is the model bundle's serial); its
tree's pages are followed on the Hub's own origin only. Every answer and the whole listing are read bounded
and parsed strictly into ``HubFile``; a path not plain, a bad hash or size, or answers that disagree are refused."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx

from lockbuild.digest import is_git_sha1, is_sha256
from lockbuild.errors import FetchError, IntegrityError, RecipeError, RemoteError
from lockbuild.fetch.cache import GIT_KEY
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import JsonPage, get_json_page
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.settings import hub_endpoint as hub_endpoint
from lockbuild.wire.urls import origin, redacted

MAX_PAGE_BYTES = 32 << 20  # one answer of the Hub's API (a tree page holds at most 1000 entries)
MAX_TREE_PAGES = 1000  # pages of one revision's tree (the Hub sends 1000 entries a page)
MAX_FILE = 1 << 40  # the largest file size believed (a 1 TiB file is no model's)
DENIED = (
    "The repo does not exist, or it is gated or private: accept its terms on the Hub and set HF_TOKEN to a "
    "token that may read it (sent to HF_ENDPOINT's origin only)."
)
_PATH_ROOM = 64  # bytes of a bundle member's path kept for the prefix the model's files go under
# The Hub's dates, as huggingface_hub's parse_datetime reads them: UTC, fractions of a second optional.
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]{1,9})?Z")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


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
    committed: dt.datetime  # the commit's date as the Hub states it (lastModified), whole seconds, UTC


def check_repo(repo: str) -> None:
    """A Hub repo id ``ORG/NAME`` as the Hub allows it (and as the cache's ``models--ORG--NAME`` can hold)."""
    if not _REPO_ID.fullmatch(repo) or ".." in repo or "--" in repo or repo.endswith("."):
        raise RecipeError(
            f"expected a Hugging Face repo id ORG/NAME (letters, digits, '.', '_', '-'; no '..' or '--'), "
            f"found {repo[:120]!r}."
        )


def check_commit(revision: str) -> None:
    """A revision pinned by commit: 40 lowercase hex digits. A branch or tag names whatever it points at
    today, so a build from one would not be reproducible: a recipe problem."""
    if not is_git_sha1(revision):
        raise RecipeError(
            f"expected the revision to be a commit (40 lowercase hex digits), found {revision[:120]!r}; a branch "
            "or tag name moves, so the model it names cannot be pinned.",
            tip="Take the commit from the model's page on the Hub (Files and versions → History) or from "
            "huggingface_hub.model_info(REPO, revision=NAME).sha, and write it as the revision.",
        )


def check_path(path: object, *, repo: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A repo path the Hub listed, refused unless plain: relative, POSIX, no empty, '.' or '..' part, no
    backslash, nothing unprintable, not too long. It becomes a path in the bundle and on the node."""
    if (
        not isinstance(path, str)
        or any(part in ("", ".", "..") for part in path.split("/"))  # also: empty, leading or trailing "/"
        or "\\" in path
        or not path.isprintable()  # no character of Unicode's categories C (control, format...) or Z but " "
        or len(path.encode()) > limits.max_path - _PATH_ROOM
    ):
        shown = path[:200] if isinstance(path, str) else path
        raise IntegrityError(
            f"the Hub's listing of {repo} names a file {shown!r}; expected a plain relative path (no '..', "
            f"no leading '/', no empty part, no backslash or control character, at most "
            f"{limits.max_path - _PATH_ROOM} bytes); refused.",
            tip="The Hub (or whatever answers at HF_ENDPOINT) sent a path that could write outside the model; "
            "nothing was downloaded.",
        )
    return path


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_FILE else None


def _bad(repo: str, commit: str, what: str) -> RemoteError:
    return RemoteError(
        f"the Hub's answer for {repo} at {commit} {what}; refused.",
        tip="Check HF_ENDPOINT: it must point at the Hugging Face Hub or a mirror that answers as it does.",
    )


def _tree_file(item: dict[str, object], repo: str, commit: str, limits: Limits) -> HubFile:
    path = check_path(item.get("path"), repo=repo, limits=limits)
    size = _count(item.get("size"))
    oid = item.get("oid")
    if size is None or not isinstance(oid, str) or not is_git_sha1(oid):
        raise _bad(repo, commit, f"lists {path!r} without a size and a git blob id (40 lowercase hex)")
    lfs = item.get("lfs")
    sha256: str | None = None
    if lfs is not None:
        lfs_oid = lfs.get("oid") if isinstance(lfs, dict) else None
        lfs_size = lfs.get("size") if isinstance(lfs, dict) else None
        if not isinstance(lfs_oid, str) or not is_sha256(lfs_oid) or _count(lfs_size) != size:
            raise _bad(repo, commit, f"lists {path!r} in LFS without its sha256 (64 lowercase hex) and size")
        sha256 = lfs_oid
    return HubFile(path, size, oid, sha256)


def _sibling(item: object, repo: str, commit: str, limits: Limits) -> HubFile:
    """A ``siblings`` entry of the revision (asked with ``blobs=true``), in the tree's terms."""
    if not isinstance(item, dict):
        raise _bad(repo, commit, "lists a file that is not an object")
    lfs = item.get("lfs")
    as_tree: dict[str, object] = {"path": item.get("rfilename"), "size": item.get("size"), "oid": item.get("blobId")}
    if lfs is not None:
        as_tree["lfs"] = {"oid": lfs.get("sha256"), "size": lfs.get("size")} if isinstance(lfs, dict) else lfs
    return _tree_file(as_tree, repo, commit, limits)


def _commit_date(data: object, repo: str, commit: str) -> dt.datetime:
    """The revision's ``lastModified``: the commit's date, to the second (a model bundle's serial)."""
    stated = data.get("lastModified") if isinstance(data, dict) else None
    m = _DATE.fullmatch(stated) if isinstance(stated, str) else None
    try:
        if m is None:
            raise ValueError
        year, month, day, hour, minute, second = (int(g) for g in m.groups())
        return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    except ValueError:
        shown = stated[:80] if isinstance(stated, str) else stated
        raise _bad(repo, commit, f"states no date for the commit (lastModified {shown!r})") from None


def _check_commit_answer(data: object, repo: str, commit: str) -> list[object]:
    if not isinstance(data, dict):
        raise _bad(repo, commit, "is not a JSON object")
    sha = data.get("sha")
    if sha != commit:
        shown = sha[:80] if isinstance(sha, str) else sha
        raise IntegrityError(
            f"asked the Hub for {repo} at commit {commit}, it answered for commit {shown!r}; refused.",
            tip="The Hub (or the mirror at HF_ENDPOINT) serves another revision than the recipe pins; nothing "
            "was downloaded.",
        )
    named = data.get("id")
    if isinstance(named, str) and named.lower() != repo.lower():
        raise _bad(repo, commit, f"names another repo ({named[:120]!r})")
    siblings = data.get("siblings")
    if not isinstance(siblings, list):
        raise _bad(repo, commit, "has no list of files (siblings)")
    return siblings


class _Listing:
    """What a revision's listing has taken so far, all its answers together: bounded as a whole
    (``Limits.max_listing_bytes`` and ``max_listing_entries``), not only answer by answer."""

    def __init__(self, client: httpx.Client, repo: str, commit: str, limits: Limits) -> None:
        self.client, self.repo, self.commit, self.limits = client, repo, commit, limits
        self.bytes = 0
        self.entries = 0

    def page(self, url: str, what: str) -> JsonPage:
        room = self.limits.max_listing_bytes - self.bytes
        over = (
            f"the Hub's listing of {self.repo} at {self.commit} is over {self.limits.max_listing_bytes} bytes in all "
            f"(its answers together); refused."
        )
        if room <= 0:
            raise _bad(self.repo, self.commit, f"is over {self.limits.max_listing_bytes} bytes in all")
        page = get_json_page(
            self.client,
            url,
            what=what,
            limit=min(MAX_PAGE_BYTES, room),
            not_found=f"the Hub has no commit {self.commit} in {self.repo}.",
            denied=DENIED,
            over=over if room < MAX_PAGE_BYTES else None,
        )
        self.bytes += page.size
        return page

    def count(self, entries: int) -> None:
        self.entries += entries
        most = min(self.limits.max_listing_entries, 2 * self.limits.max_members)  # files and their folders
        if self.entries > most:
            raise _bad(self.repo, self.commit, f"lists more than {most} entries in all")


def _tree(listing: _Listing, endpoint: str, repo: str, commit: str, limits: Limits) -> list[HubFile]:
    """Every file of the recursive tree, following each ``rel="next"`` page on the Hub's origin, bounded."""
    base = f"{endpoint}/api/models/{repo}/tree/{commit}"
    url: str | None = f"{base}?recursive=true"
    seen: set[str] = set()
    files: list[HubFile] = []
    while url is not None:
        if url in seen:
            raise _bad(repo, commit, f"repeats a page of its tree ({redacted(url)[:200]})")
        if len(seen) >= MAX_TREE_PAGES:
            raise _bad(repo, commit, f"is a tree of more than {MAX_TREE_PAGES} pages")
        seen.add(url)
        if origin(url) != origin(endpoint) or not urlsplit(url).path == urlsplit(base).path:
            raise _bad(repo, commit, f"names a next page elsewhere ({redacted(url)[:200]}); expected {base}")
        page = listing.page(url, f"listing {repo} at {commit} on the Hub")
        if not isinstance(page.data, list):
            raise _bad(repo, commit, "is a tree page that is not a list")
        listing.count(len(page.data))
        for item in page.data:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "directory" and isinstance(item, dict):
                check_path(item.get("path"), repo=repo, limits=limits)
            elif kind == "file" and isinstance(item, dict):
                files.append(_tree_file(item, repo, commit, limits))
            else:
                raise _bad(repo, commit, "lists a tree entry that is neither a file nor a directory")
        url = page.next_url
    return files


def _one_listing(tree: list[HubFile], stated: list[HubFile], repo: str, commit: str) -> tuple[HubFile, ...]:
    """The tree's files, refused unless the revision's own listing states exactly the same files (path,
    size, blob id, sha256), each once, and no file is also a directory of another."""
    by_path: dict[str, HubFile] = {}
    for f in tree:
        if by_path.setdefault(f.path, f) is not f:
            raise _bad(repo, commit, f"lists {f.path!r} twice")
    if sorted(stated, key=lambda f: f.path) != sorted(by_path.values(), key=lambda f: f.path):
        differ = sorted(
            {f.path for f in stated}.symmetric_difference(by_path)
            or {f.path for f in stated if by_path.get(f.path) != f}
        )
        raise _bad(repo, commit, f"is two listings that disagree (the revision and its tree) on {differ[:5]}")
    for path in by_path:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in by_path:
                raise _bad(repo, commit, f"lists {parent!r} both as a file and as the folder of {path!r}")
            parent = parent.rpartition("/")[0]
    return tuple(by_path[p] for p in sorted(by_path))


def list_revision(
    client: httpx.Client, endpoint: str, repo: str, revision: str, *, limits: Limits = DEFAULT_LIMITS
) -> HubRevision:
    """Every file of ``repo`` at commit ``revision``, with the sizes and hashes the Hub states.

    ``client`` is one of ``fetch/http.py``'s (``make_client(settings=...)``): it carries HF_TOKEN to the
    Hub's origin only (``Settings.auth_for``). Two answers are asked and must agree: the revision with
    ``blobs=true`` (whose ``sha`` must be the commit asked) and the recursive tree, every page of it."""
    check_repo(repo)
    check_commit(revision)
    listing = _Listing(client, repo, revision, limits)
    page = listing.page(
        f"{endpoint}/api/models/{repo}/revision/{revision}?blobs=true", f"asking the Hub for {repo} at {revision}"
    )
    siblings = _check_commit_answer(page.data, repo, revision)
    committed = _commit_date(page.data, repo, revision)
    if len(siblings) > limits.max_members:
        raise _bad(repo, revision, f"lists more than {limits.max_members} files")
    stated = [_sibling(s, repo, revision, limits) for s in siblings]
    tree = _tree(listing, endpoint, repo, revision, limits)
    return HubRevision(repo, revision, _one_listing(tree, stated, repo, revision), committed)


def file_url(endpoint: str, revision: HubRevision, f: HubFile) -> str:
    """Where the Hub serves ``f`` (an LFS file: a redirect to its CDN, which the fetcher follows)."""
    return f"{endpoint}/{revision.repo}/resolve/{revision.commit}/{quote(f.path)}"


def wanted(endpoint: str, revision: HubRevision, f: HubFile) -> Wanted:
    """The fetcher's order for ``f``: its stated size (no byte more is read), and its sha256 (LFS) or its
    git blob id (``git-sha1:`` key: sha1 of ``blob SIZE\\0`` and the bytes) as the digest it must have."""
    key = f.sha256 if f.sha256 is not None else GIT_KEY + f.blob_id
    return Wanted(file_url(endpoint, revision, f), key, f.size, f"{revision.repo} {f.path}")


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def check_sizes(
    revision: HubRevision,
    files: Sequence[HubFile],
    *,
    max_file: int,
    bound: str,
    free: int,
    where: Path,
    cached: frozenset[str] = frozenset(),
) -> None:
    """Refuse, before any download, a file whose stated size is over ``max_file`` (the recipe's ``bound``,
    e.g. ``max-file-gb = 100``) or, unless its path is ``cached`` already, over the ``free`` bytes at
    ``where`` (the cache it is downloaded into)."""
    for f in files:
        shown = f"{revision.repo} {f.path}: the Hub states a size of {f.size} bytes ({_gb(f.size)})"
        if f.size > max_file:
            raise FetchError(
                f"{shown}, over the recipe's {bound} ({max_file} bytes); refused before any download.",
                tip="If that file is meant, raise max-file-gb in the recipe's [model] table; else leave it out "
                "with exclude.",
            )
        if f.size > free and f.path not in cached:
            raise FetchError(
                f"{shown}, more than the {free} bytes ({_gb(free)}) free at {where}, where it would be "
                "downloaded; refused before any download.",
                tip="Free space there, or set LOCKBUILD_CACHE_DIR to a disk with room; or leave the file out with "
                "exclude in the recipe.",
            )


def download_files(fetcher: Fetcher, endpoint: str, revision: HubRevision, files: Sequence[HubFile]) -> dict[str, Path]:
    """Each of ``files`` as a verified local file (repo path -> its cache entry), brought by the shared
    fetcher: in parallel, resumed with Range at the byte received, never past the stated size, each
    checked against its sha256 or git blob id before it enters the cache; a mismatch is raised
    (``IntegrityError``) and nothing of that file is kept. ``fetcher``'s client must follow redirects
    (``builder/session.py``'s does): the token it carries stays on the Hub's origin."""
    orders = {f.path: wanted(endpoint, revision, f) for f in files}
    report = fetcher.fetch_all(list(orders.values()))
    by_key = {got.wanted.sha256: got.path for got in report.files}
    return {path: by_key[w.sha256] for path, w in orders.items()}
