"""The Hugging Face Hub client (``fetch/hub.py``) against the fake Hub: what it lists and downloads, and
each answer it refuses (every refusal here fails when its check is removed)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubkit import REPO, tiny_model
from servers import FakeHub

from lockbuild import settings as settings_mod
from lockbuild.errors import IntegrityError, LockbuildError, RecipeError, RemoteError
from lockbuild.fetch import hub as hubmod
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher
from lockbuild.fetch.http import make_client
from lockbuild.limits import Limits
from lockbuild.wire.urls import InsecureTransportError

TOKEN = "hf_test_token_not_for_the_cdn"
SHARD = "model-00001-of-00002.safetensors"


class Kit:
    def __init__(self, hub: FakeHub, tmp_path: Path, token: str | None = None) -> None:
        environ = {"HF_ENDPOINT": hub.endpoint, **({"HF_TOKEN": token} if token else {})}
        self.settings = settings_mod.load(environ, home=tmp_path)
        self.api = make_client(settings=self.settings)
        self.downloads = make_client(settings=self.settings)
        self.downloads.follow_redirects = True
        self.cache = Cache(tmp_path / "cache")
        self.cache.check_owner()
        self.fetcher = Fetcher(self.cache, self.downloads, sleep=lambda _: None)
        self.endpoint = self.settings.hf_endpoint

    def list(self, commit: str) -> hubmod.HubRevision:
        return hubmod.list_revision(self.api, self.endpoint, REPO, commit)

    def download(self, revision: hubmod.HubRevision, paths: list[str] | None = None) -> dict[str, Path]:
        files = [f for f in revision.files if paths is None or f.path in paths]
        return hubmod.download_files(self.fetcher, self.endpoint, revision, files)

    def cached(self) -> list[Path]:
        return [p for p in self.cache.root.rglob("*") if p.is_file()]

    def close(self) -> None:
        self.api.close()
        self.downloads.close()


@pytest.fixture
def kit(hub: FakeHub, tmp_path: Path) -> Iterator[Kit]:
    k = Kit(hub, tmp_path)
    yield k
    k.close()


def _published(hub: FakeHub) -> tuple[dict[str, bytes], str]:
    files = tiny_model()
    return files, hub.add_repo(REPO, files)


def test_lists_every_file_with_its_hashes_and_downloads_them_verified(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    hub.page_size = 3  # several pages, each naming the next
    rev = kit.list(commit)
    assert rev.repo == REPO and rev.commit == commit
    assert [f.path for f in rev.files] == sorted(files)
    for f in rev.files:
        data = files[f.path]
        assert f.size == len(data)
        assert f.blob_id == hub.repos[REPO][commit][[e.path for e in hub.repos[REPO][commit]].index(f.path)].oid
        lfs = f.path.endswith((".safetensors", ".bin", ".pth"))
        assert f.sha256 == (hashlib.sha256(data).hexdigest() if lfs else None)
        assert f.cache_name == (f.sha256 if lfs else f.blob_id)
    assert sum("/tree/" in p for p in hub.requests) == -(-(len(files) + 1) // 3)  # + the original/ folder
    got = kit.download(rev)
    assert {p: got[p].read_bytes() for p in got} == files
    again = kit.download(rev)  # from the cache: nothing asked again
    assert again == got


def test_a_branch_name_as_revision_is_refused_before_anything_is_asked(hub: FakeHub, kit: Kit) -> None:
    _published(hub)
    with pytest.raises(RecipeError, match="expected the revision to be a commit"):
        kit.list("main")
    assert hub.requests == []


@pytest.mark.parametrize("repo", ["tiny-org", "tiny-org/../x", "a/b/c", "tiny--org/x", "tiny-org/x?y"])
def test_a_malformed_repo_id_is_refused(hub: FakeHub, kit: Kit, repo: str) -> None:
    with pytest.raises(RecipeError, match="expected a Hugging Face repo id"):
        hubmod.list_revision(kit.api, kit.endpoint, repo, "0" * 40)
    assert hub.requests == []


def test_a_commit_other_than_the_one_asked_for_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.tamper_revision = lambda doc: {**doc, "sha": "f" * 40}
    with pytest.raises(IntegrityError, match=f"at commit {commit}, it answered for commit 'f{{40}}'"):
        kit.list(commit)


def _rename(old: str, new: str) -> tuple[object, object]:
    def revision(doc: dict[str, object]) -> object:
        sibs = [dict(s, rfilename=new) if s["rfilename"] == old else s for s in doc["siblings"]]  # type: ignore[attr-defined]
        return {**doc, "siblings": sibs}

    def tree(page: list[dict[str, object]]) -> object:
        return [dict(i, path=new) if i["path"] == old else i for i in page]

    return revision, tree


@pytest.mark.parametrize(
    "bad",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "a\\b.json",
        "conf\x1big.json",
        "a//b.json",
        "./config.json",
        "original/..",
        "",
        "x" * 300,
        "line\u2028sep.json",
    ],
)
def test_a_file_path_that_is_not_plain_is_refused(hub: FakeHub, kit: Kit, bad: str) -> None:
    _, commit = _published(hub)
    hub.tamper_revision, hub.tamper_tree = _rename("config.json", bad)  # type: ignore[assignment]
    with pytest.raises(IntegrityError, match="expected a plain relative path"):
        kit.list(commit)


def test_two_listings_that_disagree_are_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.tamper_tree = lambda page: [i for i in page if i["path"] != "config.json"]
    with pytest.raises(RemoteError, match=r"two listings that disagree .* \['config.json'\]"):
        kit.list(commit)


def test_a_stated_sha256_that_differs_from_the_tree_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)

    def revision(doc: dict[str, object]) -> object:
        sibs = [
            dict(s, lfs={**s["lfs"], "sha256": "0" * 64}) if s["rfilename"] == SHARD else s  # type: ignore[dict-item]
            for s in doc["siblings"]
        ]  # type: ignore[attr-defined]
        return {**doc, "siblings": sibs}

    hub.tamper_revision = revision
    with pytest.raises(RemoteError, match="disagree"):
        kit.list(commit)


def test_a_file_that_is_also_a_folder_is_refused(hub: FakeHub, kit: Kit) -> None:
    files = tiny_model()
    files["original"] = b"a file where the folder original/ is\n"
    commit = hub.add_repo(REPO, files)
    with pytest.raises(RemoteError, match="both as a file and as the folder"):
        kit.list(commit)


def test_an_lfs_file_whose_bytes_do_not_have_its_sha256_is_refused_and_not_kept(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    rev = kit.list(commit)
    hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())].corrupt_at = 100
    with pytest.raises(IntegrityError, match=f"{SHARD}: sha256 mismatch"):
        kit.download(rev, [SHARD])
    assert kit.cached() == []


def test_a_small_file_whose_bytes_do_not_have_its_git_blob_id_is_refused_and_not_kept(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    rev = kit.list(commit)
    hub.files[f"/{REPO}/resolve/{commit}/config.json"].corrupt_at = 3
    with pytest.raises(IntegrityError, match=r"config\.json: git blob sha1 mismatch"):
        kit.download(rev, ["config.json"])
    assert kit.cached() == []


def test_a_git_blob_cache_entry_is_rehashed_before_use(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    rev = kit.list(commit)
    (entry,) = kit.download(rev, ["config.json"]).values()
    entry.chmod(0o600)
    entry.write_bytes(entry.read_bytes().replace(b"llama", b"LLAMA"))
    (again,) = kit.download(rev, ["config.json"]).values()
    assert again.read_bytes() == files["config.json"]
    assert hub.requests.count(f"/{REPO}/resolve/{commit}/config.json") == 2  # the damaged entry was fetched again


def test_a_file_longer_than_stated_is_refused_at_the_stated_size(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    rev = kit.list(commit)
    served = hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())]
    served.data = files[SHARD] + b"\0" * 4096
    served.size = len(served.data)
    with pytest.raises(IntegrityError, match=f"expected at most {len(files[SHARD])} bytes"):
        kit.download(rev, [SHARD])
    assert kit.cached() == []


def test_a_dropped_connection_resumes_with_range_at_the_byte_received(hub: FakeHub, kit: Kit) -> None:
    files = tiny_model(extra_bytes=3 << 20)
    commit = hub.add_repo(REPO, files)
    rev = kit.list(commit)
    served = hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())]
    served.drop_after = 1_234_567
    got = kit.download(rev, [SHARD])
    assert got[SHARD].read_bytes() == files[SHARD]
    assert served.ranges == ["bytes=1234567-"]


def test_the_token_goes_to_the_hub_and_never_to_the_cdn(hub: FakeHub, tmp_path: Path) -> None:
    _, commit = _published(hub)
    k = Kit(hub, tmp_path, token=TOKEN)
    try:
        rev = k.list(commit)
        k.download(rev)
    finally:
        k.close()
    assert hub.request_headers and hub.cdn.request_headers
    for path, headers in hub.request_headers:  # the API, the small files, the LFS files' redirects
        assert headers.get("authorization") == f"Bearer {TOKEN}", path
    for path, headers in hub.cdn.request_headers:
        assert "authorization" not in headers and TOKEN not in str(headers), path
    assert TOKEN not in repr(k.settings)


def test_pagination_is_followed_only_on_the_hubs_origin(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.page_size = 3
    hub.next_link = f"{hub.cdn.url}/api/models/{REPO}/tree/{commit}?recursive=true&cursor=3"
    with pytest.raises(RemoteError, match="names a next page elsewhere"):
        kit.list(commit)
    assert hub.cdn.requests == []


def test_pagination_is_bounded(hub: FakeHub, kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    _, commit = _published(hub)
    hub.page_size = 3
    monkeypatch.setattr(hubmod, "MAX_TREE_PAGES", 2)
    with pytest.raises(RemoteError, match="more than 2 pages"):
        kit.list(commit)
    assert sum("/tree/" in p for p in hub.requests) == 2


def test_a_next_page_that_repeats_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.page_size = 3
    hub.next_link = f"{hub.endpoint}/api/models/{REPO}/tree/{commit}?recursive=true"  # the first page again
    with pytest.raises(RemoteError, match="repeats a page of its tree"):
        kit.list(commit)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("http://hub.example.com", InsecureTransportError),
        ("ftp://127.0.0.1", LockbuildError),
        ("https://user:pw@hub.example.com", LockbuildError),
        ("https://hub.example.com/?x=1", LockbuildError),
        ("https://hub.example.com/\n", LockbuildError),
        ("https://hub example.com", LockbuildError),
        ("https:///only-a-path", LockbuildError),
        ("https://hub.example.com/?", LockbuildError),
        ("https://hub.example.com/#top", LockbuildError),
    ],
)
def test_hf_endpoint_is_https_or_loopback_http(value: str, error: type[Exception]) -> None:
    with pytest.raises(error, match="HF_ENDPOINT"):
        hubmod.hub_endpoint({"HF_ENDPOINT": value})


def test_hf_endpoint_default_and_accepted_forms() -> None:
    assert hubmod.hub_endpoint({}) == "https://huggingface.co"
    assert hubmod.hub_endpoint({"HF_ENDPOINT": "https://mirror.example.com/hf/"}) == "https://mirror.example.com/hf"
    assert hubmod.hub_endpoint({"HF_ENDPOINT": "http://127.0.0.1:8080"}) == "http://127.0.0.1:8080"


def test_the_token_belongs_to_the_hubs_origin_only(hub: FakeHub, tmp_path: Path) -> None:
    s = settings_mod.load({"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN}, home=tmp_path)
    assert s.auth_for(f"{hub.endpoint}/api/models/{REPO}/revision/{'0' * 40}") == f"Bearer {TOKEN}"
    assert s.auth_for(f"{hub.cdn.url}/lfs-cdn/{'0' * 64}") is None  # another port: another origin
    assert s.auth_for("https://cdn-lfs.huggingface.co/x") is None
    assert TOKEN in s.secrets()


def _retyped(path: str, **fields: object):  # type: ignore[no-untyped-def]
    def tree(page: list[dict[str, object]]) -> object:
        return [{**i, **fields} if i["path"] == path else i for i in page]

    return tree


@pytest.mark.parametrize(
    ("path", "fields", "message"),
    [
        ("config.json", {"oid": "ABC"}, "without a size and a git blob id"),
        ("config.json", {"oid": "A" * 40}, "without a size and a git blob id"),
        ("config.json", {"size": -1}, "without a size and a git blob id"),
        ("config.json", {"size": True}, "without a size and a git blob id"),
        ("config.json", {"size": "12"}, "without a size and a git blob id"),
        ("config.json", {"size": 1 << 41}, "without a size and a git blob id"),
        (SHARD, {"lfs": "yes"}, "in LFS without its sha256"),
        ("config.json", {"type": "symlink"}, "neither a file nor a directory"),
    ],
)
def test_a_tree_entry_of_the_wrong_type_is_refused(
    hub: FakeHub, kit: Kit, path: str, fields: dict[str, object], message: str
) -> None:
    _, commit = _published(hub)
    hub.tamper_tree = _retyped(path, **fields)
    with pytest.raises(RemoteError, match=message):
        kit.list(commit)


def test_an_lfs_size_that_differs_from_the_files_is_refused(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    sha = hashlib.sha256(files[SHARD]).hexdigest()
    hub.tamper_tree = _retyped(SHARD, lfs={"oid": sha, "size": len(files[SHARD]) + 1})
    with pytest.raises(RemoteError, match="in LFS without its sha256"):
        kit.list(commit)


def test_a_file_listed_twice_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.tamper_tree = lambda page: page + [i for i in page if i["path"] == "config.json"]
    with pytest.raises(RemoteError, match=r"lists 'config\.json' twice"):
        kit.list(commit)


def test_an_answer_for_another_repo_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.tamper_revision = lambda doc: {**doc, "id": "other-org/other-model"}
    with pytest.raises(RemoteError, match="names another repo"):
        kit.list(commit)


def test_a_revision_without_its_file_list_is_refused(hub: FakeHub, kit: Kit) -> None:
    _, commit = _published(hub)
    hub.tamper_revision = lambda doc: {**doc, "siblings": None}
    with pytest.raises(RemoteError, match="has no list of files"):
        kit.list(commit)


@pytest.mark.parametrize(
    "stated",
    [
        None,
        "",
        "2024-03-05 06:07:08",
        "2024-03-05T06:07:08+01:00",
        "2024-13-05T06:07:08Z",
        1709618828,
        "２０２４-03-05T06:07:08Z",
    ],
)
def test_a_revision_without_a_plain_commit_date_is_refused(hub: FakeHub, kit: Kit, stated: object) -> None:
    _, commit = _published(hub)
    hub.tamper_revision = lambda doc: {**doc, "lastModified": stated}
    with pytest.raises(RemoteError, match="states no date for the commit"):
        kit.list(commit)


def test_the_commit_date_is_read_as_the_hub_states_it(hub: FakeHub, kit: Kit) -> None:
    files = tiny_model()
    commit = hub.add_repo(REPO, files, date="2024-03-05T06:07:08.123456789Z")
    assert kit.list(commit).committed == dt.datetime(2024, 3, 5, 6, 7, 8, tzinfo=dt.UTC)


def test_the_number_of_files_is_bounded(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    few = Limits(max_members=5)
    with pytest.raises(RemoteError, match="lists more than 5 files"):
        hubmod.list_revision(kit.api, kit.endpoint, REPO, commit, limits=few)
    hub.tamper_revision = lambda doc: {**doc, "siblings": doc["siblings"][:5]}  # type: ignore[index]
    with pytest.raises(RemoteError, match="lists more than 10 entries"):
        hubmod.list_revision(kit.api, kit.endpoint, REPO, commit, limits=few)
    assert len(files) > 10


def test_an_lfs_sha256_that_is_not_lowercase_hex_is_refused(hub: FakeHub, kit: Kit) -> None:
    files, commit = _published(hub)
    hub.tamper_tree = _retyped(
        SHARD, lfs={"oid": hashlib.sha256(files[SHARD]).hexdigest().upper(), "size": len(files[SHARD])}
    )
    with pytest.raises(RemoteError, match="in LFS without its sha256"):
        kit.list(commit)


def test_the_revision_answer_is_read_bounded(hub: FakeHub, kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    _, commit = _published(hub)
    hub.page_size = 2  # small tree pages: only the revision's answer is over the bound
    hub.tamper_revision = lambda doc: {**doc, "cardData": {"padding": "x" * 20_000}}
    monkeypatch.setattr(hubmod, "MAX_PAGE_BYTES", 10_000)
    with pytest.raises(RemoteError, match=r"/revision/.* sent more than 10000 bytes"):
        kit.list(commit)


def test_a_tree_page_is_read_bounded(hub: FakeHub, kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    _, commit = _published(hub)
    hub.tamper_tree = _retyped("config.json", lastCommit={"title": "x" * 20_000})
    monkeypatch.setattr(hubmod, "MAX_PAGE_BYTES", 10_000)
    with pytest.raises(RemoteError, match=r"/tree/.* sent more than 10000 bytes"):
        kit.list(commit)


def test_only_the_hub_client_speaks_the_hubs_api_and_only_the_settings_read_its_token() -> None:
    """One place asks the Hub (``fetch/hub.py``: its checks apply to every answer) and one place reads
    ``HF_TOKEN`` and ``HF_ENDPOINT`` (both in the settings: ``settings.hub_endpoint``)."""
    import ast

    import lockbuild

    package = Path(lockbuild.__file__).parent
    speaks: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for needle in ("/api/models/", "/resolve/"):  # in any string: an f-string's parts too
                    if needle in node.value:
                        speaks.setdefault(needle, []).append(rel)
            if isinstance(node, (ast.Call, ast.Subscript)):  # environ.get("HF_TOKEN"), environ["HF_TOKEN"]
                args = node.args if isinstance(node, ast.Call) else [node.slice]
                for arg in args:
                    if isinstance(arg, ast.Constant) and arg.value in ("HF_TOKEN", "HF_ENDPOINT"):
                        speaks.setdefault(arg.value, []).append(rel)
    assert set(speaks.get("/api/models/", [])) == {"fetch/hub.py"}
    assert set(speaks.get("/resolve/", [])) == {"fetch/hub.py"}
    assert set(speaks.get("HF_TOKEN", [])) == {"settings.py"}
    assert set(speaks.get("HF_ENDPOINT", [])) == {"settings.py"}


def test_a_repo_the_hub_will_not_show_says_what_to_do(hub: FakeHub, kit: Kit) -> None:
    with pytest.raises(RemoteError, match=r"HTTP 401\. The repo does not exist, or it is gated or private.*HF_TOKEN"):
        hubmod.list_revision(kit.api, kit.endpoint, "other-org/gated-model", "0" * 40)


def test_a_commit_the_hub_does_not_have_is_named(hub: FakeHub, kit: Kit) -> None:
    _published(hub)
    with pytest.raises(RemoteError, match=f"the Hub has no commit {'e' * 40} in {REPO}"):
        kit.list("e" * 40)
