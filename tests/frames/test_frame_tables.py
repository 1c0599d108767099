"""Framed bundles on the node: the frame tables checked before any frame is read (overlap, gap, past the
file, sizes beyond the bounds, another digest than the signed one), every frame hashed against them
before it is decompressed, verify's count of frames, and the stock tools (minisign, zstd, tar)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile import AS_OF, RECIPE, UV_MEMBER, manifest, member

import lockbuild.frames.framepool as framepool
from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.write import Entry, write_bundle
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.frames.seektable import FRAME_SIZE, MAX_COMPRESSED, max_frames
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.minisign import read_secret_key, sign_prehashed, write_keypair
from lockbuild.trust import Statement, load_trust_store, open_bundle, signature_path


def payload() -> bytes:
    """About two and a half frames of data that compresses unevenly."""
    seed = hashlib.sha256(b"frames").digest()
    noise = b"".join(hashlib.sha256(seed + i.to_bytes(4, "little")).digest() for i in range(1 << 17))
    return (b"lockbuild " * 100_000 + noise)[: FRAME_SIZE * 5 // 2]


def write(tmp_path: Path, *, framed: bool = True) -> tuple[Path, Manifest]:
    data = payload()
    members = [
        member("recipe.toml", RECIPE, "recipe"),
        member("assets/model.bin", data),
        member(UV_MEMBER, b"uv", "tool"),
    ]
    m = manifest(members)
    bundle = tmp_path / "dist" / m.bundle_name
    bundle.parent.mkdir(parents=True, exist_ok=True)
    out = io.BytesIO()
    write_bundle(out, m, [Entry(members[0], RECIPE), Entry(members[1], data), Entry(members[2], b"uv")], framed=framed)
    bundle.write_bytes(out.getvalue())
    return bundle, m


def sign(tmp_path: Path, bundle: Path, m: Manifest, *, tables_at: int | None) -> Path:
    """A trusted key signs ``bundle`` as it is (its frame tables, whatever they say, from ``tables_at``):
    only the reader's own checks stand between these tables and the frames. The trust directory."""
    keys = tmp_path / "keys"
    if not keys.exists():
        keys.mkdir()
        write_keypair(keys / "k", password=None)
        (tmp_path / "trust").mkdir()
        shutil.copyfile(keys / "k.pub", tmp_path / "trust" / "k.pub")
    key = read_secret_key(keys / "k.key", lambda: "")
    raw = bundle.read_bytes()
    frames = None if tables_at is None else hashlib.sha256(raw[tables_at:]).hexdigest()
    st = Statement.of(
        m, name=bundle.name, sha256=hashlib.sha256(raw).hexdigest(), size=len(raw), expires=None, frames_sha256=frames
    )
    blake = hashlib.blake2b(raw, digest_size=64).digest()
    signature_path(bundle).write_text(sign_prehashed(key, blake, st.to_comment()))
    return tmp_path / "trust"


def tables_at(raw: bytes) -> int:
    n = struct.unpack("<I", raw[-9:-5])[0]
    return len(raw) - (8 + 8 + 32 * n + 8 + 8 * n + 9)


@pytest.fixture
def no_decompression(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any frame decompressed fails the test: a refusal must come first."""

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a frame was decompressed")

    monkeypatch.setattr(framepool.zstandard, "ZstdDecompressor", refuse)


def entry_at(raw: bytes, i: int) -> int:
    """Where frame ``i``'s (compressed, decompressed) sizes lie in the seek table."""
    n = struct.unpack("<I", raw[-9:-5])[0]
    return len(raw) - 9 - 8 * n + 8 * i


def with_entry(raw: bytes, i: int, csize: int | None = None, dsize: int | None = None) -> bytes:
    at = entry_at(raw, i)
    c, d = struct.unpack_from("<II", raw, at)
    return raw[:at] + struct.pack("<II", c if csize is None else csize, d if dsize is None else dsize) + raw[at + 8 :]


def with_count(raw: bytes, n: int) -> bytes:
    return raw[:-9] + struct.pack("<I", n) + raw[-5:]


CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "overlap": (
        lambda r: with_entry(r, 1, csize=struct.unpack_from("<I", r, entry_at(r, 1))[0] + 1),
        "overlap its frame tables",
    ),
    "gap": (
        lambda r: with_entry(r, 1, csize=struct.unpack_from("<I", r, entry_at(r, 1))[0] - 1),
        "leave 1 bytes before its frame tables",
    ),
    "past-the-file": (lambda r: with_count(r, len(r) // 40 + 1), "point past its start"),
    "too-many": (lambda r: with_count(r, max_frames(DEFAULT_LIMITS) + 1), "frames; expected 1 to"),
    "content-over": (lambda r: with_entry(r, 2, dsize=FRAME_SIZE + 1), "decompresses to 2097153 bytes"),
    "content-short": (lambda r: with_entry(r, 0, dsize=FRAME_SIZE - 1), "frame 0 decompresses to 2097151 bytes"),
    "compressed-over": (lambda r: with_entry(r, 0, csize=MAX_COMPRESSED + 1), f"expected 6 to {MAX_COMPRESSED}"),
    "descriptor": (lambda r: r[:-5] + b"\x80" + r[-4:], "descriptor is 0x80"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("no_decompression")
def test_a_frame_table_out_of_bounds_is_refused_before_any_frame(tmp_path: Path, case: str) -> None:
    """Tables a trusted key signed as they are (their digest is the signed one) are still checked: each
    of these is refused by its own check, before a frame is read."""
    bundle, m = write(tmp_path)
    mutate, why = CASES[case]
    raw = bundle.read_bytes()
    bad = mutate(raw)
    bundle.write_bytes(bad)
    trust = sign(tmp_path, bundle, m, tables_at=tables_at(raw) if case not in ("past-the-file", "too-many") else 0)
    with pytest.raises(IntegrityError, match=why) as exc:
        open_bundle(bundle, load_trust_store(trust), now=AS_OF)
    assert "Traceback" not in str(exc.value)


@pytest.mark.usefixtures("no_decompression")
def test_tables_that_are_not_the_signed_ones_are_refused_before_any_frame(tmp_path: Path) -> None:
    bundle, m = write(tmp_path)
    raw = bundle.read_bytes()
    trust = sign(tmp_path, bundle, m, tables_at=tables_at(raw))
    bundle.write_bytes(with_entry(raw, 2, dsize=struct.unpack_from("<II", raw, entry_at(raw, 2))[1] - 1))
    with pytest.raises(SignatureError, match="it signs frame tables of sha256"):
        open_bundle(bundle, load_trust_store(trust), now=AS_OF)


@pytest.mark.usefixtures("no_decompression")
def test_a_frame_that_does_not_match_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    bundle, m = write(tmp_path)
    trust = sign(tmp_path, bundle, m, tables_at=tables_at(bundle.read_bytes()))
    raw = bytearray(bundle.read_bytes())
    raw[100] ^= 1  # inside frame 0
    bundle.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=r"frame 0 .* does not have the sha256 its signed frame table lists"):
        open_bundle(bundle, load_trust_store(trust), now=AS_OF)


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout


def test_verify_counts_frames_and_members(tmp_path: Path) -> None:
    bundle, m = write(tmp_path)
    trust = sign(tmp_path, bundle, m, tables_at=tables_at(bundle.read_bytes()))
    code, out = run("verify", str(bundle), "--trust", str(trust))
    assert code == 0 and out.strip().endswith("; 3 frames match the signed table"), out
    code, out = run("verify", str(bundle), "--trust", str(trust), "--json")
    assert code == 0 and json.loads(out)["frames"] == 3
    code, out = run("verify", str(bundle), "--trust", str(trust), "--members")
    assert code == 0 and out.strip().endswith("; 3 members match the signed manifest"), out
    raw = bytearray(bundle.read_bytes())
    raw[tables_at(bytes(raw)) - 100] ^= 1  # in the last frame: verify without --members hashes it too
    bundle.write_bytes(bytes(raw))
    code, out = run("verify", str(bundle), "--trust", str(trust))
    assert code == 4 and "frames match" not in out  # IntegrityError


def test_a_bundle_made_before_frames_verifies_as_before(tmp_path: Path) -> None:
    bundle, m = write(tmp_path, framed=False)
    trust = sign(tmp_path, bundle, m, tables_at=None)
    code, out = run("verify", str(bundle), "--trust", str(trust), "--json")
    assert code == 0 and json.loads(out)["frames"] is None and json.loads(out)["members"] == 3
    code, out = run("verify", str(bundle), "--trust", str(trust))
    assert out.strip().endswith("; 3 members match the signed manifest"), out


@pytest.mark.skipif(not all(map(shutil.which, ("minisign", "zstd", "tar"))), reason="needs minisign, zstd and tar")
def test_stock_tools_read_a_framed_bundle(tmp_path: Path) -> None:
    bundle, m = write(tmp_path)
    sign(tmp_path, bundle, m, tables_at=tables_at(bundle.read_bytes()))
    subprocess.run(
        ["minisign", "-Vm", str(bundle), "-p", str(tmp_path / "keys" / "k.pub"), "-q"], check=True, capture_output=True
    )
    listing = subprocess.run(
        f"zstd -dc '{bundle}' | tar -tf -", shell=True, check=True, capture_output=True, text=True
    ).stdout.split()
    assert listing == ["bundle.toml", "recipe.toml", "assets/model.bin", UV_MEMBER]
    subprocess.run(["zstd", "-t", "-q", str(bundle)], check=True)
