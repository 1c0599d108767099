"""The Hub client's bounds as a whole: a revision's listing (all its answers together, bytes and entries, not
only page by page), and a file's stated size (the recipe's ``max-file-gb``, and the free space of the cache
it is downloaded into), each refused before any download with a message naming what and the bound."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys
from hubkit import REPO, tiny_model
from servers import FakeHub

from lockbuild.cli import main
from lockbuild.errors import FetchError, RecipeError, RemoteError
from lockbuild.fetch import hub as hubmod
from lockbuild.fetch.http import make_client
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.recipe.modelrecipe import parse_model_recipe

SHARD = "model-00001-of-00002.safetensors"
COMMIT = "0" * 40


@pytest.fixture
def published(hub: FakeHub) -> Iterator[str]:
    hub.page_size = 3  # five tree pages of 300 to 600 bytes; the revision's answer is about 2300 bytes
    yield hub.add_repo(REPO, tiny_model(extra_bytes=5000))


def test_the_listing_is_bounded_as_a_whole_not_only_page_by_page(hub: FakeHub, published: str) -> None:
    with make_client() as client:
        whole = hubmod.list_revision(client, hub.endpoint, REPO, published)  # the default bounds take it
        assert len(whole.files) == 14
        with pytest.raises(RemoteError) as err:
            hubmod.list_revision(client, hub.endpoint, REPO, published, limits=Limits(max_listing_bytes=3500))
    assert (
        err.value.message
        == f"the Hub's listing of {REPO} at {published} is over 3500 bytes in all (its answers together); refused."
    )
    assert sum("/tree/" in p for p in hub.requests) == 5 + 3  # the whole listing, then the third page refused


def test_the_listing_entries_are_bounded_as_a_whole(hub: FakeHub, published: str) -> None:
    with make_client() as client, pytest.raises(RemoteError, match=r"lists more than 10 entries in all; refused"):
        hubmod.list_revision(client, hub.endpoint, REPO, published, limits=Limits(max_listing_entries=10))
    assert DEFAULT_LIMITS.max_listing_entries == 200_000 and DEFAULT_LIMITS.max_listing_bytes == 256 << 20


def _recipe(tmp: Path, commit: str, extra: str = "") -> Path:
    p = tmp / "tiny.toml"
    p.write_text(f'[model]\nname = "tiny-llama"\nrepo = "{REPO}"\nrevision = "{commit}"\n{extra}')
    return p


def _build(tmp: Path, keys: Keys, recipe: Path) -> tuple[int, dict[str, object], str]:
    r = CliRunner().invoke(main, ["build", str(recipe), "--key", keys.secret, "--out", str(tmp / "out"), "--json"])
    return r.exit_code, json.loads(r.stdout), r.stderr


def _downloads(hub: FakeHub) -> list[str]:
    return [p for p in hub.requests if "/resolve/" in p] + hub.cdn.requests


def test_a_file_over_max_file_gb_is_refused_before_any_download(
    hub: FakeHub, published: str, keys: Keys, tmp_path: Path
) -> None:
    code, out, _ = _build(tmp_path, keys, _recipe(tmp_path, published, "max-file-gb = 0.000005\n"))
    assert code == 1
    error = out["error"]
    assert isinstance(error, dict)
    assert error["message"] == (
        f"{REPO} {SHARD}: the Hub states a size of 5576 bytes (0.0 GB), over the recipe's max-file-gb = 5e-06 "
        "(5000 bytes); refused before any download."
    )
    assert "raise max-file-gb" in error["tip"]
    assert _downloads(hub) == []
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_file_over_the_free_space_of_the_cache_is_refused_before_any_download(
    hub: FakeHub, published: str, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.disk_usage

    def nearly_full(path: str | Path) -> shutil._ntuple_diskusage:
        got = real(path)
        return type(got)(got.total, got.total - 4000, 4000)

    monkeypatch.setattr("lockbuild.builder.modelbuild.shutil.disk_usage", nearly_full)
    code, out, _ = _build(tmp_path, keys, _recipe(tmp_path, published))
    assert code == 1
    error = out["error"]
    assert isinstance(error, dict)
    assert error["message"].startswith(
        f"{REPO} {SHARD}: the Hub states a size of 5576 bytes (0.0 GB), more than the 4000 bytes"
    )
    assert "where it would be downloaded; refused before any download" in error["message"]
    assert "LOCKBUILD_CACHE_DIR" in error["tip"]
    assert _downloads(hub) == []


def test_a_file_already_in_the_cache_needs_no_free_space() -> None:
    rev = hubmod.HubRevision(
        REPO,
        COMMIT,
        (hubmod.HubFile("a.safetensors", 10_000, "1" * 40, "2" * 64),),
        dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    )
    kw = {"max_file": 10**9, "bound": "max-file-gb = 1", "free": 100, "where": Path("/cache")}
    hubmod.check_sizes(rev, rev.files, cached=frozenset({"a.safetensors"}), **kw)  # type: ignore[arg-type]
    with pytest.raises(FetchError, match="more than the 100 bytes"):
        hubmod.check_sizes(rev, rev.files, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0", "-1", "true", '"100"', "nan", "inf", "[1]"])
def test_max_file_gb_must_be_a_positive_number(value: str) -> None:
    text = f'[model]\nname = "x"\nrepo = "o/m"\nrevision = "{COMMIT}"\nmax-file-gb = {value}\n'
    with pytest.raises(RecipeError) as err:
        parse_model_recipe(text)
    assert err.value.problems[0].startswith("model.max-file-gb: expected a positive number of gigabytes (default 100)")


def test_max_file_gb_defaults_to_100_gb_and_takes_a_fraction() -> None:
    text = f'[model]\nname = "x"\nrepo = "o/m"\nrevision = "{COMMIT}"\n'
    assert parse_model_recipe(text).max_file_bytes == 100 * 10**9
    assert parse_model_recipe(text + "max-file-gb = 0.5\n").max_file_bytes == 500_000_000
