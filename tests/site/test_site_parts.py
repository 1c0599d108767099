"""Media parts: `split` writes parts that `cat` joins into the identical file; `import` takes the part
list and refuses a damaged part by name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import Keys, make_keys
from sitekit import cli, make_bundle

from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.site.partlist import parse_part_list, parse_size


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("parts-keys"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> Path:
    return make_bundle(tmp_path_factory.mktemp("parts-bundle"), [signer.secret])


def _split(bundle: Path, out: Path, size: str = "200") -> dict[str, object]:
    r = cli("split", bundle, "--size", size, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def test_parts_join_with_cat_into_the_identical_file_and_import(tmp_path: Path, bundle: Path, signer: Keys) -> None:
    done = _split(bundle, tmp_path / "media")
    parts = done["parts"]
    assert isinstance(parts, list) and len(parts) > 2
    assert all(p["size"] == 200 for p in parts[:-1]) and 0 < parts[-1]["size"] <= 200
    names = [str(tmp_path / "media" / p["name"]) for p in parts]
    joined = subprocess.run(["cat", *names], capture_output=True, check=True).stdout
    assert joined == bundle.read_bytes()
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["build"] == "toyengine/1.0-cpu"
    assert cli("store", "verify", "--store", tmp_path / "store").exit_code == 0


def test_split_never_writes_through_a_link_planted_in_its_output_directory(tmp_path: Path, bundle: Path) -> None:
    """Another user who can write the media directory plants links at the names split writes: the
    signature copy, the part list and the old fixed name of a part's temporary file. Each result is made
    as a new file and renamed over the link; what the links point at is untouched."""
    media = tmp_path / "media"
    media.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = [f"{bundle.name}.minisig", f"{bundle.name}.parts.toml", f".{bundle.name}.part000.partial"]
    for name in planted:
        (media / name).symlink_to(victim)
    done = _split(bundle, media)
    assert victim.read_text() == "precious\n"
    sig = media / f"{bundle.name}.minisig"
    assert not sig.is_symlink() and sig.read_bytes() == Path(f"{bundle}.minisig").read_bytes()
    assert not (media / f"{bundle.name}.parts.toml").is_symlink()
    assert [p.name for p in media.iterdir() if p.name.startswith(".") and p.name != planted[2]] == []
    assert len(done["parts"]) > 2  # type: ignore[arg-type]


def test_a_flipped_byte_in_a_part_is_refused_naming_the_part(tmp_path: Path, bundle: Path, signer: Keys) -> None:
    done = _split(bundle, tmp_path / "media")
    parts = done["parts"]
    assert isinstance(parts, list)
    victim = tmp_path / "media" / parts[1]["name"]
    data = bytearray(victim.read_bytes())
    data[10] ^= 0x40
    victim.write_bytes(bytes(data))
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4
    assert f"the part {victim.name} is damaged" in r.output
    assert list((tmp_path / "store" / "blobs" / "sha256").iterdir()) == []


def test_a_short_or_missing_part_is_refused_naming_it(tmp_path: Path, bundle: Path, signer: Keys) -> None:
    done = _split(bundle, tmp_path / "media")
    parts = done["parts"]
    assert isinstance(parts, list)
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    short = tmp_path / "media" / parts[0]["name"]
    short.write_bytes(short.read_bytes()[:-1])
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4 and f"the part {short.name} is 199 bytes" in r.output
    (tmp_path / "media" / parts[0]["name"]).unlink()
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4 and f"cannot read the part {short.name}" in r.output


GOOD_HEX = "0" * 64


@pytest.mark.parametrize(
    "name",
    ["../../etc/passwd", "sub/part000", "..", ".hidden", "/abs", "a\\b"],
)
def test_a_part_list_naming_a_path_is_refused(name: str) -> None:
    raw = (
        f'format = 1\nfile = "x.lbz"\nsize = 1\nsha256 = "{GOOD_HEX}"\n'
        f'[[parts]]\nname = {json.dumps(name)}\nsize = 1\nsha256 = "{GOOD_HEX}"\n'
    ).encode()
    with pytest.raises(IntegrityError, match="is not a plain file name"):
        parse_part_list(raw, "list")


def test_sizes() -> None:
    assert parse_size("4G") == 4 * 10**9 < 2**32 - 1  # fits FAT32
    assert parse_size("4GiB") == 4 << 30
    assert parse_size("700M") == 700 * 10**6
    assert parse_size("1024") == 1024
    for bad in ("0", "-1", "4X", "G", ""):
        with pytest.raises(LockbuildError):
            parse_size(bad)


@pytest.mark.parametrize("file", ["../../ESCAPED", "sub/ESCAPED", "ABSOLUTE"])
def test_a_part_list_whose_file_is_a_path_writes_nothing_outside(tmp_path: Path, bundle: Path, file: str) -> None:
    _split(bundle, tmp_path / "media")
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    text = listing.read_text()
    if file == "ABSOLUTE":
        file = str(tmp_path / "ESCAPED")
    listing.write_text(text.replace(f'file = "{bundle.name}"', f"file = {json.dumps(file)}"))
    before = set(tmp_path.rglob("*"))
    r = cli("inspect", listing)
    assert r.exit_code == 4, r.output
    assert "malformed file" in r.output
    assert set(tmp_path.rglob("*")) == before


def test_parts_that_join_to_another_digest_are_refused(tmp_path: Path, bundle: Path, signer: Keys) -> None:
    done = _split(bundle, tmp_path / "media")
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    text = listing.read_text()
    whole = str(done["sha256"])
    listing.write_text(text.replace(f'sha256 = "{whole}"', f'sha256 = "{GOOD_HEX}"', 1))
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code != 0
    assert f"the joined parts have sha256 {whole}; the part list says {GOOD_HEX}" in r.output


def test_a_part_that_shrinks_while_it_is_read_is_refused_naming_it(
    tmp_path: Path, bundle: Path, signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part had its listed size when it was opened, then another process cut it short: the join counts
    the bytes it read and refuses the part by name, and the store gets no build."""
    import lockbuild.site.partlist as parts_module

    done = _split(bundle, tmp_path / "media")
    parts = done["parts"]
    assert isinstance(parts, list)
    victim = tmp_path / "media" / parts[1]["name"]
    opened = parts_module.open_regular

    def open_then_cut(path: Path, **kw: object) -> object:
        got = opened(path, **kw)  # type: ignore[arg-type]
        if path.name == victim.name:
            os.truncate(path, 150)
        return got

    monkeypatch.setattr(parts_module, "open_regular", open_then_cut)
    listing = tmp_path / "media" / f"{bundle.name}.parts.toml"
    r = cli("import", listing, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4, r.output
    assert f"the part {victim.name} is 150 bytes; its list says 200 (it changed while it was read)" in r.output
    listed = json.loads(cli("store", "list", "--store", tmp_path / "store", "--json").stdout)
    assert (listed["builds"], listed["blobs"]) == ([], 0)
