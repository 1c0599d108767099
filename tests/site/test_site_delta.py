"""Delta bundles: the new signed manifest and only the members the base lacks; a store holding the
base completes it, and one without the base is told what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Keys, make_keys
from sitekit import cli, files_for, make_bundle

from lockbuild.trust.sign import read_unverified


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("delta-keys"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("delta-bundles")
    return {v: make_bundle(out, [signer.secret], version=v) for v in ("1.0", "1.1")}


def _ok(*args: str | Path) -> dict[str, object]:
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _delta(bundles: dict[str, Path], out: Path, trust: Path) -> Path:
    done = _ok("delta", bundles["1.1"], "--base", bundles["1.0"], "--out", out, "--trust", trust)
    assert done["included"] == 3 and done["members"] == 5  # the shared torch and uv wheels stay behind
    return Path(str(done["delta"]))


def test_a_delta_completes_a_store_that_holds_the_base(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    assert delta.name == bundles["1.1"].name.removesuffix(".lbz") + ".delta.lbz"
    assert delta.stat().st_size < bundles["1.1"].stat().st_size
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    done = _ok("import", delta, "--trust", signer.trust, "--store", store)
    assert done["build"] == "toyengine/1.1-cpu" and done["added_blobs"] == 3
    full = tmp_path / "full"
    _ok("import", bundles["1.1"], "--trust", signer.trust, "--store", full)
    for sub in ("blobs/sha256", "builds/toyengine/1.1-cpu"):  # as importing the full bundle (plus 1.0's own)
        for p in (full / sub).iterdir():
            assert (store / sub / p.name).read_bytes() == p.read_bytes()
    assert cli("store", "verify", "--store", store).exit_code == 0


def test_a_delta_never_works_in_a_directory_planted_in_its_output_directory(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    """Another user who can write --out plants a link, at the work directory's old fixed name (a dot,
    "delta-", the process id), to a directory of theirs: the members would have been unpacked there, where
    they could change them before they are packed. The work directory is now mkdtemp's own."""
    import os

    out, theirs = tmp_path / "deltas", tmp_path / "theirs"
    out.mkdir()
    theirs.mkdir()
    (out / f".delta-{os.getpid()}").symlink_to(theirs)
    delta = _delta(bundles, out, signer.trust)
    assert list(theirs.iterdir()) == []
    assert delta.is_file() and sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        delta.name,
        delta.name + ".minisig",
    ]


def test_a_delta_without_its_base_names_what_is_missing(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    r = cli("import", delta, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4
    assert "needs 2 member(s) the store lacks" in r.output and "wheels/torch-2.0-py3-none-any.whl" in r.output
    assert "toyengine/1.0-cpu" in r.output  # the base it was cut against
    assert list((tmp_path / "store" / "blobs" / "sha256").iterdir()) == []


def test_an_untrusted_delta_is_refused_before_decompressing(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lockbuild.site.sources

    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    stranger = make_keys(tmp_path / "stranger")

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("decompressed before the signature policy was met")

    monkeypatch.setattr(lockbuild.site.sources, "open_stream", boom)
    r = cli("import", delta, "--trust", stranger.trust, "--store", tmp_path / "store")
    assert r.exit_code == 3 and "signature policy not met" in r.output


def test_a_delta_with_a_swapped_member_is_refused(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    other = make_bundle(
        tmp_path / "other",
        [signer.secret],
        version="1.1",
        files=[(p, d + b"!" if p.endswith("1.1-py3-none-any.whl") else d, k) for p, d, k in files_for("1.1")],
    )
    done = _ok("delta", other, "--base", bundles["1.0"], "--out", tmp_path / "evil", "--trust", signer.trust)
    evil = Path(str(done["delta"]))
    # the real 1.1's signatures beside a delta whose manifest and member differ
    Path(f"{evil}.minisig").write_bytes(Path(f"{bundles['1.1']}.minisig").read_bytes())
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    r = cli("import", evil, "--trust", signer.trust, "--store", store)
    assert r.exit_code == 4 and "the signatures sign" in r.output
    assert [p.name for p in (store / "builds" / "toyengine").iterdir()] == ["1.0-cpu"]


def test_a_delta_is_not_mistaken_for_a_bundle(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    from lockbuild.errors import IntegrityError

    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    with pytest.raises(IntegrityError, match=r"expected bundle\.toml"):
        read_unverified(delta)


def test_inspect_and_verify_say_what_a_delta_is_and_needs(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    shown = _ok("inspect", delta)
    assert (shown["engine"], shown["version"], shown["variant"]) == ("toyengine", "1.1", "cpu")
    needs = ["tools/uv-0.9.0-py3-none-any.whl", "wheels/torch-2.0-py3-none-any.whl"]
    checked = _ok("verify", delta, "--trust", signer.trust)
    assert checked["build"] == "toyengine/1.1-cpu" and checked["members"] == 5 and checked["absent"] == needs
    text = cli("verify", delta, "--trust", signer.trust)
    assert text.exit_code == 0 and "3 members match the signed manifest; 2 left to a store" in text.output
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    whole = _ok("verify", delta, "--trust", signer.trust, "--store", store)  # the store completes it
    assert whole["absent"] == [] and whole["members"] == 5
    stranger = make_keys(tmp_path / "stranger")
    assert cli("verify", delta, "--trust", stranger.trust).exit_code == 3


def test_a_delta_is_cut_only_from_bundles_that_meet_the_policy(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`delta` reads nothing unsigned: NEW (or BASE) signed by a key the trust directory lacks is refused
    before a byte of it is decompressed, and no delta is written."""
    import lockbuild.bundle.read

    stranger = make_keys(tmp_path / "stranger")
    other = make_bundle(tmp_path / "other", [stranger.secret], version="1.1")  # NEW signed by a stranger only

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("decompressed before the signature policy was met")

    monkeypatch.setattr(lockbuild.bundle.read, "decompressed", boom)
    out = tmp_path / "out"
    r = cli("delta", bundles["1.1"], "--base", bundles["1.0"], "--out", out, "--trust", stranger.trust)
    assert r.exit_code == 3 and "signature policy not met" in r.output, r.output
    assert not out.exists() or list(out.iterdir()) == []
    monkeypatch.undo()  # BASE is trusted here, and read once its signatures are met; NEW is refused
    r = cli("delta", other, "--base", bundles["1.0"], "--out", tmp_path / "out2", "--trust", signer.trust)
    assert r.exit_code == 3 and "signature policy not met" in r.output, r.output
    assert not (tmp_path / "out2").exists() or list((tmp_path / "out2").iterdir()) == []
