"""The model bundle's format: stored frames for weights, pax size records past 8 GiB, the manifest's
model table read strictly."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import Keys
from modelkit import COMMIT, model_bundle

from lockbuild.bundle.manifest import Manifest, Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.modelinfo import MODEL_FORMAT, ModelFile, ModelTable
from lockbuild.bundle.read import read_head
from lockbuild.bundle.tar import TarReader
from lockbuild.bundle.write import Entry, tar_header, write_bundle
from lockbuild.bundle.zstdframe import Decompressed, check_zstd_frame, decompressed
from lockbuild.errors import IntegrityError
from lockbuild.frames.seektable import read_file_tables
from lockbuild.limits import DEFAULT_LIMITS

EIGHT_GIB = 8 << 30  # one more than a ustar size field holds (11 octal digits)


def test_a_member_of_8_gib_gets_a_pax_size_record_the_reader_takes() -> None:
    head = tar_header("model/big.safetensors", EIGHT_GIB, 0)
    assert b" size=8589934592\n" in head
    tar = TarReader(Decompressed(iter([head]), 1 << 20))
    h = tar.next()
    assert h is not None and h.size == EIGHT_GIB and h.name == "model/big.safetensors"


def test_stock_zstd_and_tar_unpack_a_model_bundle(tmp_path: Path, keys: Keys) -> None:
    """Stored frames are plain zstd: `zstd -d | tar` reads the bundle, weights byte for byte."""
    packed = model_bundle(tmp_path, keys.secret)
    out = tmp_path / "unpacked"
    out.mkdir()
    z = subprocess.run(["zstd", "-dc", str(packed.bundle)], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=z.stdout, check=True)
    from hubkit import tiny_model

    shard = "model-00001-of-00002.safetensors"
    assert (out / "model" / shard).read_bytes() == tiny_model()[shard]
    with packed.bundle.open("rb") as f:  # a framed bundle: weights in the fixed-size frames like any member
        table = read_file_tables(f, DEFAULT_LIMITS)
    assert table.tables_at == sum(fr.size for fr in table.frames)


def test_the_manifest_records_every_model_file(tmp_path: Path, keys: Keys) -> None:
    packed = model_bundle(tmp_path, keys.secret)
    m, _ = read_head(packed.bundle)
    assert m.format == MODEL_FORMAT and m.version == COMMIT and m.model is not None
    text = m.to_toml().decode()
    assert "[model]" in text and "[install]" not in text and 'repo-path = "config.json"' in text
    for f in m.model.files:
        assert f.member == "model/" + f.repo_path and len(f.blob_id) == 40


def _model_manifest(**changes: object) -> bytes:
    data = b"{}"
    member = Member("model/config.json", 2, hashlib.sha256(data).hexdigest(), "model-file")
    recipe = Member("recipe.toml", 2, hashlib.sha256(data).hexdigest(), "recipe")
    import datetime as dt

    from lockbuild.bundle.modelinfo import MODEL_INSTALL

    m = Manifest(
        "tiny",
        COMMIT,
        "hf",
        "none",
        "any",
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        0,
        "0" * 64,
        "0.2.0",
        "none",
        "none",
        (recipe, member),
        MODEL_INSTALL,
        format=MODEL_FORMAT,
        model=ModelTable(
            "org/tiny", COMMIT, (ModelFile(member.path, "config.json", 2, member.sha256, "a" * 40, False),)
        ),
    )
    text = m.to_toml().decode()
    for old, new in changes.items():
        text = text.replace(old.replace("_", "-"), str(new)) if old != "raw" else str(new)
    return text.encode()


def test_a_model_manifest_round_trips() -> None:
    m = parse_manifest(_model_manifest())
    assert m.model is not None and m.model.file("config.json") is not None


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ('repo-path = "config.json"', 'repo-path = "other.json"', "repo-path"),
        ('blob-id = "' + "a" * 40, 'blob-id = "' + "A" * 40, "blob-id"),
        ("lfs = false", 'lfs = "no"', "lfs"),
        (f'commit = "{COMMIT}"', 'commit = "main"', "model.commit"),
        ('repo = "org/tiny"', 'repo = "../tiny"', "model.repo"),
        ('variant = "hf"', 'variant = "cpu"', "variant"),
        ("[model]", "[install]\n[model]", "[install] table"),
        ('kind = "model-file"', 'kind = "asset"', "model-file"),
    ],
)
def test_a_model_manifest_is_read_strictly(old: str, new: str, why: str) -> None:
    text = _model_manifest().decode()
    assert old in text
    with pytest.raises(IntegrityError, match=why.replace("[", "\\[")):
        parse_manifest(text.replace(old, new, 1).encode())


def test_an_engine_manifest_may_not_carry_model_files() -> None:
    text = _model_manifest().decode().replace("format = 4", "format = 2")
    with pytest.raises(IntegrityError):
        parse_manifest(text.encode())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sparse_file_over_8_gib_round_trips_through_a_stored_frame(tmp_path: Path) -> None:
    """A weight file of 8 GiB (sparse on disk), in the layout made before frames: written in a stored frame
    with a pax size record, and read
    back by the strict reader to the same sha256. The bundle streams through a pipe, never to disk."""
    big = tmp_path / "big.safetensors"
    with big.open("wb") as f:
        f.truncate(EIGHT_GIB)
    h = hashlib.sha256()
    with big.open("rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    sha = h.hexdigest()
    recipe = b"[model]\n"
    members = (
        Member("recipe.toml", len(recipe), hashlib.sha256(recipe).hexdigest(), "recipe"),
        Member("model/big.safetensors", EIGHT_GIB, sha, "model-file"),
    )
    import datetime as dt

    from lockbuild.bundle.modelinfo import MODEL_INSTALL

    manifest = Manifest(
        "big",
        COMMIT,
        "hf",
        "none",
        "any",
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        0,
        "0" * 64,
        "0.2.0",
        "none",
        "none",
        members,
        MODEL_INSTALL,
        format=MODEL_FORMAT,
        model=ModelTable(
            "org/big", COMMIT, (ModelFile(members[1].path, "big.safetensors", EIGHT_GIB, sha, "b" * 40, True),)
        ),
    )
    r, w = os.pipe()
    errors: list[BaseException] = []

    def writer() -> None:
        with os.fdopen(w, "wb") as out:
            try:
                entries = [Entry(members[0], recipe), Entry(members[1], big)]
                write_bundle(out, manifest, entries, threads=1, framed=False)  # stored frames: made before frames
            except BaseException as exc:
                errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    with os.fdopen(r, "rb", buffering=1 << 20) as raw:
        tar = TarReader(decompressed(raw, DEFAULT_LIMITS))
        first = tar.next()
        assert first is not None and first.name == "bundle.toml"
        tar.f.read(first.size + (-first.size % 512))
        tar.offset += first.size + (-first.size % 512)
        second = tar.next()
        assert second is not None and second.name == "recipe.toml"
        tar.f.read(second.size + (-second.size % 512))
        tar.offset += second.size + (-second.size % 512)
        third = tar.next()
        assert third is not None and third.size == EIGHT_GIB
        got = hashlib.sha256()
        left = third.size
        while left:
            piece = tar.f.take(min(left, 1 << 20))
            got.update(piece)
            left -= len(piece)
        assert got.hexdigest() == sha
        while tar.f.read(1 << 20):
            pass
    t.join()
    assert not errors


def test_an_engine_manifest_with_a_model_file_member_is_refused() -> None:
    import datetime as dt

    from lockbuild.bundle.instructions import InstallTable

    data = b"{}"
    sha = hashlib.sha256(data).hexdigest()
    members = (
        Member("recipe.toml", 2, sha, "recipe"),
        Member("tools/uv.whl", 2, sha, "tool"),
        Member("model/config.json", 2, sha, "model-file"),
    )
    m = Manifest(
        "toy",
        "1.0",
        "cpu",
        "3.12",
        "x86_64-manylinux_2_28",
        dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        1,
        "0" * 64,
        "0.2.0",
        "0.9.0",
        "requirements.txt",
        members,
        InstallTable(binary="toy", verify=("toy",), gpu_probe="none", uv="tools/uv.whl"),
    )
    with pytest.raises(IntegrityError, match=r"model-file 'model/config\.json' but is not a model bundle"):
        parse_manifest(m.to_toml())


def test_a_stored_frame_block_over_128_kib_is_refused() -> None:
    data = bytes(200 << 10)
    frame = b"\x28\xb5\x2f\xfd\x00\x38" + ((len(data) << 3) | 1).to_bytes(3, "little") + data
    with pytest.raises(IntegrityError, match="a block holds at most"):
        check_zstd_frame(io.BytesIO(frame))


def test_inspect_describes_a_model_bundle(tmp_path: Path, keys: Keys) -> None:
    import json

    from click.testing import CliRunner

    from lockbuild.cli import main

    packed = model_bundle(tmp_path, keys.secret)
    r = CliRunner().invoke(main, ["inspect", str(packed.bundle), "--json"])
    data = json.loads(r.stdout)
    assert data["install"] is None and data["model"]["commit"] == COMMIT
    assert {f["repo_path"] for f in data["model"]["files"]} >= {"config.json", "tokenizer.json"}
    r = CliRunner().invoke(main, ["inspect", str(packed.bundle)])
    assert "--models" in r.stdout and COMMIT in r.stdout
