"""Tests for the minisign codec (lockbuild.minisign) and the policy over signature blocks: formats,
refusals, and interop with the real minisign."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from lockbuild import minisign as signing
from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.minisign import (
    PublicKey,
    SecretKey,
    Signature,
    decode_secret_key,
    encode_secret_key,
    generate_secret_key,
    parse_public_key,
    parse_signatures,
    prehash,
    read_public_key,
    read_secret_key,
    scrypt_params,
    sign_prehashed,
    verify_signature,
    write_keypair,
)
from lockbuild.trust import FileDigests, Statement, TrustStore, evaluate, format_trusted_comment, parse_trusted_comment
from lockbuild.trust import load_trust_store as load_trust_dir

MINISIGN = shutil.which("minisign")
needs_minisign = pytest.mark.skipif(
    MINISIGN is None, reason="the minisign binary is not on PATH; interop tests need the real minisign"
)

# Light scrypt parameters for tests (N=2**14, r=8, p=2): same format, fast.
LIGHT_OPSLIMIT, LIGHT_MEMLIMIT = 2**20, 2**24


def encrypt_light(sk: SecretKey, password: str) -> str:
    return encode_secret_key(sk, password, opslimit=LIGHT_OPSLIMIT, memlimit=LIGHT_MEMLIMIT)


DATA = b"bundle bytes\x00\x01\x02" * 1000
DIGEST = hashlib.blake2b(DATA, digest_size=64).digest()
SHA = hashlib.sha256(DATA).hexdigest()
NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
STATEMENT = Statement("x.lbz", "vllm", "0.11.0", "cpu", SHA, len(DATA), "cd" * 32, 1735689600)
TC = STATEMENT.to_comment()


def check_policy(
    sigs: Sequence[Signature], trust: TrustStore, *, file_blake2b: bytes = DIGEST, threshold: int | None = None
) -> tuple[PublicKey, ...]:
    """The signers counted for x.lbz (DATA), or the SignatureError that says why too few counted."""
    file = FileDigests(len(DATA), SHA, file_blake2b)
    result = evaluate(sigs, trust, name="x.lbz", now=NOW, file=file, threshold=threshold)
    result.require()
    return result.signers


def no_password() -> str:
    raise AssertionError("password() must not be called for an unencrypted key")


def password_is(value: str) -> Callable[[], str]:
    return lambda: value


def trust_of(*keys: PublicKey, revoked: tuple[bytes, ...] = ()) -> TrustStore:
    return TrustStore(keys=keys, revoked=frozenset(revoked), source="test trust store")


def sign_one(sk: SecretKey, digest: bytes = DIGEST, tc: str = TC) -> Signature:
    (sig,) = parse_signatures(sign_prehashed(sk, digest, tc))
    return sig


def run_minisign(*args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
    assert MINISIGN is not None
    result = subprocess.run([MINISIGN, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


@pytest.fixture(scope="module")
def key_a() -> SecretKey:
    return generate_secret_key()


@pytest.fixture(scope="module")
def key_b() -> SecretKey:
    return generate_secret_key()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "bundle.lbz"
    path.write_bytes(DATA)
    return path


@pytest.fixture(scope="module")
def minisign_encrypted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, SecretKey]:
    """One key pair made by `minisign -G` with its default (1 GiB) scrypt, decoded once by our code."""
    if MINISIGN is None:
        pytest.skip("the minisign binary is not on PATH; interop tests need the real minisign")
    base = tmp_path_factory.mktemp("minisign-enc")
    pub, key = base / "ms.pub", base / "ms.key"
    run_minisign("-G", "-p", str(pub), "-s", str(key), stdin="pw one\npw one\n")
    sk = read_secret_key(key, password_is("pw one"))
    return key, pub, sk


# ----------------------------------------------------------------------------------------------
# Round trips and formats


def test_round_trip_sign_verify(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC, "my untrusted comment")
    lines = text.split("\n")
    assert len(lines) == 5 and lines[-1] == ""
    assert lines[0] == "untrusted comment: my untrusted comment"
    assert lines[2] == f"trusted comment: {TC}"
    (sig,) = parse_signatures(text)
    assert sig.algorithm == b"ED" and sig.key_id == key_a.key_id
    assert sig.trusted_comment == TC and sig.untrusted_comment == "my untrusted comment"
    assert sig.to_text() == text
    assert parse_signatures(text.encode()) == (sig,)
    verify_signature(sig, key_a.public_key(), file_blake2b=DIGEST)
    assert check_policy([sig], trust_of(key_a.public_key()), file_blake2b=DIGEST) == (key_a.public_key(),)


def test_prehash_matches_hashlib() -> None:
    chunks = [DATA[i : i + 777] for i in range(0, len(DATA), 777)]
    assert prehash(chunks) == DIGEST
    assert prehash([]) == hashlib.blake2b(b"", digest_size=64).digest()


def test_public_key_text_round_trip(key_a: SecretKey) -> None:
    pk = key_a.public_key()
    text = pk.to_text()
    assert text.startswith(f"untrusted comment: minisign public key {pk.key_id_hex}\n")
    assert parse_public_key(text) == pk
    assert parse_public_key(text.splitlines()[1]) == pk  # bare base64 line
    assert parse_public_key(pk.to_text("custom")) == pk
    assert len(pk.key_id_hex) == 16 and pk.key_id_hex == pk.key_id_hex.upper()
    assert pk.key_id_hex == f"{int.from_bytes(pk.key_id, 'little'):016X}"
    assert signing.parse_key_id(pk.key_id_hex) == pk.key_id
    assert signing.parse_key_id(pk.key_id_hex.lower()) == pk.key_id


def test_public_key_refusals(key_a: SecretKey) -> None:
    body = key_a.public_key().to_text().splitlines()[1]
    with pytest.raises(SignatureError, match="wrong length") as exc:
        parse_public_key(base64.b64encode(base64.b64decode(body)[:-1]).decode())
    assert exc.value.tip
    with pytest.raises(SignatureError, match="not valid base64"):
        parse_public_key("untrusted comment: x\nnot*base64")
    with pytest.raises(SignatureError, match="algorithm"):
        parse_public_key(base64.b64encode(b"XX" + base64.b64decode(body)[2:]).decode())
    with pytest.raises(SignatureError, match="untrusted comment"):
        parse_public_key("comment\n" + body)
    with pytest.raises(SignatureError, match="3 lines"):
        parse_public_key(f"untrusted comment: x\n{body}\n{body}\n")


def test_secret_key_round_trip_unencrypted(key_a: SecretKey) -> None:
    text = encode_secret_key(key_a, None)
    raw = base64.b64decode(text.splitlines()[1])
    assert len(raw) == 158 and raw[:6] == b"Ed\0\0B2"
    assert decode_secret_key(text, no_password) == key_a
    assert repr(key_a).count("private") == 0  # the key material stays out of reprs


def test_secret_key_round_trip_encrypted(key_a: SecretKey) -> None:
    text = encrypt_light(key_a, "correct horse")
    raw = base64.b64decode(text.splitlines()[1])
    assert raw[:6] == b"EdScB2"
    assert int.from_bytes(raw[38:46], "little") == LIGHT_OPSLIMIT
    assert int.from_bytes(raw[46:54], "little") == LIGHT_MEMLIMIT
    assert key_a.key_id not in raw  # the key id is encrypted too
    calls: list[int] = []

    def password() -> str:
        calls.append(1)
        return "correct horse"

    assert decode_secret_key(text, password) == key_a
    assert calls == [1]


def test_wrong_passphrase(key_a: SecretKey) -> None:
    text = encrypt_light(key_a, "correct horse")
    with pytest.raises(SignatureError, match=r"wrong passphrase for my\.key") as exc:
        decode_secret_key(text, password_is("battery staple"), source="my.key")
    assert exc.value.tip


def test_secret_key_refusals(key_a: SecretKey) -> None:
    text = encode_secret_key(key_a, None)
    raw = bytearray(base64.b64decode(text.splitlines()[1]))
    raw[100] ^= 1
    corrupted = "untrusted comment: x\n" + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(SignatureError, match="corrupted"):
        decode_secret_key(corrupted, no_password)
    # minisign -G -W writes a zeroed checksum; accepted, but the seed must still match the public half.
    raw = bytearray(base64.b64decode(text.splitlines()[1]))
    raw[-32:] = bytes(32)
    zeroed = "untrusted comment: x\n" + base64.b64encode(bytes(raw)).decode()
    assert decode_secret_key(zeroed, no_password) == key_a
    raw[70] ^= 1
    with pytest.raises(SignatureError, match="does not match its seed"):
        decode_secret_key("untrusted comment: x\n" + base64.b64encode(bytes(raw)).decode(), no_password)
    raw = bytearray(base64.b64decode(text.splitlines()[1]))
    raw[2:4] = b"Ar"
    with pytest.raises(SignatureError, match="unsupported key derivation"):
        decode_secret_key("untrusted comment: x\n" + base64.b64encode(bytes(raw)).decode(), no_password)
    with pytest.raises(SignatureError, match="non-empty passphrase"):
        encode_secret_key(key_a, "")


def test_scrypt_params_follow_libsodium() -> None:
    # minisign's defaults (…_SENSITIVE): 1 GiB.
    assert scrypt_params(signing.MINISIGN_DEFAULT_OPSLIMIT, signing.MINISIGN_DEFAULT_MEMLIMIT) == (
        2**20,
        8,
        1,
    )
    # Ours: 128 MiB.
    assert scrypt_params(signing.DEFAULT_OPSLIMIT, signing.DEFAULT_MEMLIMIT) == (2**17, 8, 1)
    # libsodium's …_INTERACTIVE and the light test parameters.
    assert scrypt_params(524288, 16777216) == (2**14, 8, 1)
    assert scrypt_params(2**20, 2**24) == (2**14, 8, 2)
    # The opslimit-bound branch.
    assert scrypt_params(2**20, 2**40) == (2**15, 8, 1)


def test_absurd_scrypt_parameters_refused(key_a: SecretKey) -> None:
    text = encrypt_light(key_a, "pw")
    raw = bytearray(base64.b64decode(text.splitlines()[1]))
    raw[46:54] = (2**40).to_bytes(8, "little")
    raw[38:46] = (2**40).to_bytes(8, "little")
    hostile = "untrusted comment: x\n" + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(SignatureError, match="refusing scrypt parameters"):
        decode_secret_key(hostile, password_is("pw"))


def test_trusted_comment_round_trip() -> None:
    fields = {
        "file": "vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz",
        "engine": "vllm",
        "version": "0.11.0",
        "sha256": "ab" * 32,
        "serial": "1759628400",
        "note": "a b=c%d é",
        "empty": "",
    }
    text = format_trusted_comment(fields)
    assert text.startswith("lockbuild file=vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz engine=vllm ")
    assert " " not in text.split(" ", 1)[1].replace(" ", "", len(fields) - 1)
    parsed = parse_trusted_comment(text)
    assert parsed == fields and list(parsed) == list(fields)
    assert parse_trusted_comment("lockbuild") == {}


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("minisign file=x", "starting with 'lockbuild'"),
        ("lockbuildfile=x", "starting with 'lockbuild'"),
        ("lockbuild file=x file=y", "duplicated"),
        ("lockbuild file", "malformed"),
        ("lockbuild =x", "malformed"),
        ("lockbuild file=a b", "malformed"),
        ("lockbuild  file=x", "malformed"),
        ("lockbuild file=%zz", "malformed"),
        ("lockbuild file=%ff", "malformed"),
        ("lockbuild file=%FF", "not percent-encoded UTF-8"),
        ("lockbuild file=%41", "not canonically"),
    ],
)
def test_trusted_comment_refusals(text: str, cause: str) -> None:
    with pytest.raises(SignatureError, match=cause):
        parse_trusted_comment(text)


def test_trusted_comment_must_be_one_line(key_a: SecretKey) -> None:
    with pytest.raises(SignatureError, match="single line"):
        sign_prehashed(key_a, DIGEST, "lockbuild a=b\nforged")
    with pytest.raises(SignatureError, match="too long"):
        sign_prehashed(key_a, DIGEST, "x" * 9000)
    with pytest.raises(ValueError, match="field names"):
        format_trusted_comment({"a b": "c"})


# ----------------------------------------------------------------------------------------------
# Refusals: verification


def test_flipped_bit_in_signature(key_a: SecretKey) -> None:
    sig = sign_one(key_a)
    flipped = bytearray(sig.signature)
    flipped[10] ^= 0x04
    bad = dataclasses.replace(sig, signature=bytes(flipped))
    with pytest.raises(SignatureError, match="bad signature") as exc:
        verify_signature(bad, key_a.public_key(), file_blake2b=DIGEST)
    assert exc.value.tip
    with pytest.raises(SignatureError, match="does not verify"):
        check_policy([bad], trust_of(key_a.public_key()), file_blake2b=DIGEST)


def test_flipped_bit_in_signature_file_text(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    lines = text.split("\n")
    raw = bytearray(base64.b64decode(lines[1]))
    raw[-1] ^= 0x80
    lines[1] = base64.b64encode(bytes(raw)).decode()
    (sig,) = parse_signatures("\n".join(lines))
    with pytest.raises(SignatureError, match="bad signature"):
        verify_signature(sig, key_a.public_key(), file_blake2b=DIGEST)


def test_edited_trusted_comment(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, "lockbuild version=0.11.0")
    (sig,) = parse_signatures(text.replace("version=0.11.0", "version=0.12.0"))
    with pytest.raises(SignatureError, match=r"trusted comment .* was\s+modified"):
        verify_signature(sig, key_a.public_key(), file_blake2b=DIGEST)


def test_signature_for_another_file(key_a: SecretKey) -> None:
    sig = sign_one(key_a)
    other = hashlib.blake2b(DATA + b"!", digest_size=64).digest()
    with pytest.raises(SignatureError, match="does not verify against this file"):
        verify_signature(sig, key_a.public_key(), file_blake2b=other)


def test_key_id_mismatch(key_a: SecretKey, key_b: SecretKey) -> None:
    sig = sign_one(key_a)
    with pytest.raises(SignatureError, match=f"key id mismatch.*{key_a.public_key().key_id_hex}"):
        verify_signature(sig, key_b.public_key(), file_blake2b=DIGEST)


def test_forged_key_id(key_a: SecretKey, key_b: SecretKey) -> None:
    """A valid signature by A relabelled with trusted B's key id is tampering, not a skip."""
    forged = dataclasses.replace(sign_one(key_a), key_id=key_b.key_id)
    with pytest.raises(SignatureError, match=f"names trusted key {key_b.public_key().key_id_hex}.*bad signature"):
        check_policy([forged], trust_of(key_b.public_key()), file_blake2b=DIGEST)


def test_legacy_ed_refused(key_a: SecretKey) -> None:
    sig = key_a.private.sign(DATA)  # legacy: over the raw file
    legacy = Signature(
        algorithm=b"Ed",
        key_id=key_a.key_id,
        signature=sig,
        trusted_comment=TC,
        global_signature=key_a.private.sign(sig + TC.encode()),
        untrusted_comment="legacy",
    )
    (reparsed,) = parse_signatures(legacy.to_text())
    assert reparsed == legacy
    with pytest.raises(SignatureError, match=r"legacy.*requires prehashed"):
        verify_signature(legacy, key_a.public_key(), file_blake2b=DIGEST)
    with pytest.raises(SignatureError, match=r"legacy.*cannot be checked against its BLAKE2b-512"):
        verify_signature(legacy, key_a.public_key(), file_blake2b=DIGEST, require_prehashed=False)
    with pytest.raises(SignatureError, match="legacy non-prehashed"):
        check_policy([legacy], trust_of(key_a.public_key()), file_blake2b=DIGEST)


# ----------------------------------------------------------------------------------------------
# Refusals: parsing signature files


def test_truncated_signature_file(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    with pytest.raises(SignatureError, match="truncated"):
        parse_signatures("\n".join(text.split("\n")[:3]) + "\n")
    with pytest.raises(SignatureError, match="empty"):
        parse_signatures("")
    # A cut in the middle of the base64 line.
    with pytest.raises(SignatureError, match="signature 1"):
        parse_signatures(text[: len(text) - 30])


def test_base64_of_wrong_length(key_a: SecretKey) -> None:
    lines = sign_prehashed(key_a, DIGEST, TC).split("\n")
    lines[1] = base64.b64encode(base64.b64decode(lines[1])[:-3]).decode()
    with pytest.raises(SignatureError, match="wrong length: expected 74 bytes, found 71"):
        parse_signatures("\n".join(lines))
    lines = sign_prehashed(key_a, DIGEST, TC).split("\n")
    lines[3] = base64.b64encode(base64.b64decode(lines[3]) + b"\0").decode()
    with pytest.raises(SignatureError, match=r"global signature 1 .*wrong length: expected 64 bytes, found 65"):
        parse_signatures("\n".join(lines))


def test_invalid_base64(key_a: SecretKey) -> None:
    lines = sign_prehashed(key_a, DIGEST, TC).split("\n")
    lines[1] = lines[1][:-4] + "!!!!"
    with pytest.raises(SignatureError, match="not valid base64"):
        parse_signatures("\n".join(lines))


@pytest.mark.parametrize("line", [1, 3], ids=["signature", "global-signature"])
def test_non_canonical_base64_is_refused(key_a: SecretKey, line: int) -> None:
    """Stray padding bits decode to the same bytes; a strict parser refuses them (one encoding per block)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    lines = sign_prehashed(key_a, DIGEST, TC).split("\n")
    body = lines[line].rstrip("=")
    pad = len(lines[line]) - len(body)
    last = alphabet.index(body[-1])
    lines[line] = body[:-1] + alphabet[last | 1] + "=" * pad  # a padding bit set: same bytes
    assert base64.b64decode(lines[line]) == base64.b64decode(sign_prehashed(key_a, DIGEST, TC).split("\n")[line])
    with pytest.raises(SignatureError, match="not canonical base64"):
        parse_signatures("\n".join(lines))


def test_cr_inside_a_line(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    with pytest.raises(SignatureError, match="line 1 contains a carriage return"):
        parse_signatures(text.replace("\n", "\r\n"))
    with pytest.raises(SignatureError, match="line 3 contains a carriage return"):
        parse_signatures(text.replace(TC, TC + "\rextra"))


def test_unknown_algorithm(key_a: SecretKey) -> None:
    lines = sign_prehashed(key_a, DIGEST, TC).split("\n")
    lines[1] = base64.b64encode(b"XX" + base64.b64decode(lines[1])[2:]).decode()
    with pytest.raises(SignatureError, match=r"unknown signature algorithm.*b'XX'"):
        parse_signatures("\n".join(lines))


def test_missing_comment_prefixes(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    with pytest.raises(SignatureError, match="'untrusted comment: '"):
        parse_signatures(text.replace("untrusted comment: ", "comment: "))
    with pytest.raises(SignatureError, match=r"line 3.*'trusted comment: '"):
        parse_signatures(text.replace("\ntrusted comment: ", "\ntrusted: "))


def test_non_utf8_too_large_and_too_many(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    with pytest.raises(SignatureError, match="UTF-8"):
        parse_signatures(text.encode().replace(b"lockbuild", b"lock\xffbuild"))
    with pytest.raises(SignatureError, match="at most 65536 bytes"):
        parse_signatures(text.encode() * 300)
    with pytest.raises(SignatureError, match="at most 65536 bytes"):
        parse_signatures(text * 300)
    with pytest.raises(SignatureError, match="at most 3 signature blocks, found 4"):
        parse_signatures(text * 4, max_signatures=3)
    assert len(parse_signatures(text * 3, max_signatures=3)) == 3


def test_missing_final_newline_is_accepted(key_a: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC)
    assert parse_signatures(text.rstrip("\n")) == parse_signatures(text)


# ----------------------------------------------------------------------------------------------
# Policy


def test_untrusted_key(key_a: SecretKey, key_b: SecretKey) -> None:
    sig = sign_one(key_a)
    with pytest.raises(SignatureError, match=r"needed 1 .*found 0") as exc:
        check_policy([sig], trust_of(key_b.public_key()), file_blake2b=DIGEST)
    assert f"key id {key_a.public_key().key_id_hex}, which is not in the trust store" in exc.value.message
    assert exc.value.tip


def test_unknown_key_is_skipped_when_another_counts(key_a: SecretKey, key_b: SecretKey) -> None:
    sigs = [sign_one(key_b), sign_one(key_a)]
    assert check_policy(sigs, trust_of(key_a.public_key()), file_blake2b=DIGEST) == (key_a.public_key(),)


def test_threshold_two_same_key_twice(key_a: SecretKey) -> None:
    later = dataclasses.replace(STATEMENT, expires=NOW + dt.timedelta(days=1)).to_comment()
    sigs = [sign_one(key_a), sign_one(key_a, tc=later)]
    trust = trust_of(key_a.public_key())
    with pytest.raises(SignatureError, match=r"needed 2 .*found 1") as exc:
        check_policy(sigs, trust, file_blake2b=DIGEST, threshold=2)
    assert "counts once" in exc.value.message
    assert check_policy(sigs, trust, file_blake2b=DIGEST) == (key_a.public_key(),)


def test_threshold_two_distinct_keys(key_a: SecretKey, key_b: SecretKey) -> None:
    text = sign_prehashed(key_a, DIGEST, TC) + sign_prehashed(key_b, DIGEST, TC)
    sigs = parse_signatures(text)
    trust = trust_of(key_a.public_key(), key_b.public_key())
    assert check_policy(sigs, trust, file_blake2b=DIGEST, threshold=2) == (
        key_a.public_key(),
        key_b.public_key(),
    )
    with pytest.raises(SignatureError, match=r"needed 3 .*found 2"):
        check_policy(sigs, trust, file_blake2b=DIGEST, threshold=3)


def test_revoked_key_refused(key_a: SecretKey, key_b: SecretKey) -> None:
    sigs = [sign_one(key_a)]
    trust = trust_of(key_a.public_key(), key_b.public_key(), revoked=(key_a.key_id,))
    with pytest.raises(SignatureError, match=r"needed 1 .*found 0.*revoked"):
        check_policy(sigs, trust, file_blake2b=DIGEST)


def test_no_signatures_and_bad_threshold(key_a: SecretKey) -> None:
    with pytest.raises(SignatureError, match="no signatures present"):
        check_policy([], trust_of(key_a.public_key()), file_blake2b=DIGEST)
    with pytest.raises(ValueError, match="at least 1"):  # a caller's mistake, not a signature problem
        check_policy([sign_one(key_a)], trust_of(key_a.public_key()), file_blake2b=DIGEST, threshold=0)


# ----------------------------------------------------------------------------------------------
# I/O: key files and the trust directory


def test_write_keypair(tmp_path: Path) -> None:
    key_path, pub_path = write_keypair(tmp_path / "release", password=None, comment="release key")
    assert key_path == tmp_path / "release.key" and pub_path == tmp_path / "release.pub"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert pub_path.read_text().startswith("untrusted comment: release key\n")
    sk = read_secret_key(key_path, no_password)
    assert sk.public_key() == read_public_key(pub_path)
    before = key_path.read_bytes()
    with pytest.raises(LockbuildError, match="already exists"):
        write_keypair(tmp_path / "release", password=None)
    assert key_path.read_bytes() == before
    # A stray .pub also blocks, and nothing is left behind.
    (tmp_path / "other.pub").write_text("x")
    with pytest.raises(SignatureError, match="already exists"):
        write_keypair(tmp_path / "other", password=None)
    assert not (tmp_path / "other.key").exists()


def test_read_missing_key(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match="cannot read public key"):
        read_public_key(tmp_path / "nope.pub")


def test_trust_dir_loads_keys_and_revocations(tmp_path: Path, key_a: SecretKey, key_b: SecretKey) -> None:
    (tmp_path / "a.pub").write_text(key_a.public_key().to_text())
    (tmp_path / "b.pub").write_text(key_b.public_key().to_text())
    (tmp_path / "README").write_text("not a key")
    (tmp_path / "revoked.txt").write_text(
        f"# compromised 2025-01-01\n{key_b.public_key().key_id_hex}  # laptop stolen\n\n"
    )
    trust = load_trust_dir(tmp_path)
    assert set(trust.keys) == {key_a.public_key(), key_b.public_key()} and len(trust.keys) == 2
    assert trust.revoked == frozenset({key_b.key_id})
    assert trust.source == str(tmp_path)
    sigs = parse_signatures(sign_prehashed(key_a, DIGEST, TC) + sign_prehashed(key_b, DIGEST, TC))
    assert check_policy(sigs, trust, file_blake2b=DIGEST) == (key_a.public_key(),)


def test_trust_dir_missing(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match="does not exist"):
        load_trust_dir(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(SignatureError, match="is not a directory"):
        load_trust_dir(tmp_path / "file")


def test_trust_dir_empty(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"holds no \*\.pub files") as exc:
        load_trust_dir(tmp_path)
    assert exc.value.tip


def test_trust_dir_malformed_pub(tmp_path: Path, key_a: SecretKey) -> None:
    (tmp_path / "a.pub").write_text(key_a.public_key().to_text())
    (tmp_path / "broken.pub").write_text("untrusted comment: oops\nRWQgarbage\n")
    with pytest.raises(SignatureError, match=r"malformed public key.*broken.pub"):
        load_trust_dir(tmp_path)


def test_trust_dir_malformed_revocations(tmp_path: Path, key_a: SecretKey) -> None:
    (tmp_path / "a.pub").write_text(key_a.public_key().to_text())
    (tmp_path / "revoked.txt").write_text("ABCDEF\n")
    with pytest.raises(SignatureError, match=r"revoked.txt line 1"):
        load_trust_dir(tmp_path)


def test_trust_dir_key_id_collision(tmp_path: Path, key_a: SecretKey, key_b: SecretKey) -> None:
    (tmp_path / "a.pub").write_text(key_a.public_key().to_text())
    clash = PublicKey(key_id=key_a.key_id, raw=key_b.public_key().raw)
    (tmp_path / "b.pub").write_text(clash.to_text())
    with pytest.raises(SignatureError, match="already used by a different key"):
        load_trust_dir(tmp_path)


def test_trust_dir_pub_that_is_not_a_file(tmp_path: Path, key_a: SecretKey) -> None:
    (tmp_path / "a.pub").write_text(key_a.public_key().to_text())
    (tmp_path / "weird.pub").mkdir()
    with pytest.raises(
        SignatureError, match=r"malformed public key.*weird\.pub is a directory: expected a regular file"
    ):
        load_trust_dir(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files regardless of permissions")
def test_trust_dir_unreadable_pub(tmp_path: Path, key_a: SecretKey) -> None:
    pub = tmp_path / "a.pub"
    pub.write_text(key_a.public_key().to_text())
    pub.chmod(0)
    try:
        with pytest.raises(SignatureError, match="cannot open the public key"):
            load_trust_dir(tmp_path)
    finally:
        pub.chmod(0o644)


# ----------------------------------------------------------------------------------------------
# Interop with the real minisign


@needs_minisign
@pytest.mark.parametrize("password", [None, "our pass"])
def test_minisign_verifies_our_keys_and_signatures(tmp_path: Path, data_file: Path, password: str | None) -> None:
    key_path, pub_path = write_keypair(tmp_path / "ours", password=password)  # default scrypt parameters
    sk = read_secret_key(key_path, password_is(password) if password else no_password)
    tc = format_trusted_comment({"file": data_file.name, "note": "two words"})
    sig_path = tmp_path / "ours.minisig"
    sig_path.write_text(sign_prehashed(sk, prehash([data_file.read_bytes()]), tc))
    result = run_minisign("-Vm", str(data_file), "-x", str(sig_path), "-p", str(pub_path))
    assert f"Trusted comment: {tc}" in result.stdout
    # minisign also requires prehashed (-H) and accepts ours.
    run_minisign("-V", "-H", "-m", str(data_file), "-x", str(sig_path), "-p", str(pub_path))
    # minisign's verification fails on a different file, as ours does.
    data_file.write_bytes(DATA + b"!")
    assert run_minisign("-Vm", str(data_file), "-x", str(sig_path), "-p", str(pub_path), check=False).returncode


@needs_minisign
@pytest.mark.parametrize("password", [None, "our pass"])
def test_minisign_signs_with_our_secret_key(tmp_path: Path, data_file: Path, password: str | None) -> None:
    key_path, pub_path = write_keypair(tmp_path / "ours", password=password)
    sig_path = tmp_path / "theirs.minisig"
    run_minisign(
        "-S",
        "-s",
        str(key_path),
        "-m",
        str(data_file),
        "-x",
        str(sig_path),
        "-t",
        "signed by minisign",
        stdin=f"{password}\n" if password else "",
    )
    (sig,) = parse_signatures(sig_path.read_bytes(), source=str(sig_path))
    assert sig.algorithm == b"ED" and sig.trusted_comment == "signed by minisign"
    verify_signature(sig, read_public_key(pub_path), file_blake2b=DIGEST)


@needs_minisign
def test_minisign_light_scrypt_key_interop(tmp_path: Path, data_file: Path, key_a: SecretKey) -> None:
    """Lighter scrypt parameters (N=2**14, p=2) still follow the format stock minisign reads."""
    key_path = tmp_path / "light.key"
    key_path.write_text(encrypt_light(key_a, "light"))
    sig_path = tmp_path / "light.minisig"
    run_minisign("-S", "-s", str(key_path), "-m", str(data_file), "-x", str(sig_path), stdin="light\n")
    (sig,) = parse_signatures(sig_path.read_text())
    verify_signature(sig, key_a.public_key(), file_blake2b=DIGEST)


@pytest.mark.slow  # over 5 s
@needs_minisign
def test_minisign_generated_encrypted_key(
    tmp_path: Path, data_file: Path, minisign_encrypted: tuple[Path, Path, SecretKey]
) -> None:
    key_path, pub_path, sk = minisign_encrypted
    raw = base64.b64decode(key_path.read_text().splitlines()[1])
    assert raw[:6] == b"EdScB2"
    assert int.from_bytes(raw[38:46], "little") == signing.MINISIGN_DEFAULT_OPSLIMIT
    assert int.from_bytes(raw[46:54], "little") == signing.MINISIGN_DEFAULT_MEMLIMIT
    pk = read_public_key(pub_path)
    assert sk.public_key() == pk
    shown = pub_path.read_text().splitlines()[0].split()[-1]  # minisign drops leading zeros
    assert int(shown, 16) == int(pk.key_id_hex, 16)
    assert signing.parse_key_id(shown.rjust(16, "0")) == pk.key_id
    # minisign signs (default is prehashed ED); we verify.
    theirs = tmp_path / "theirs.minisig"
    run_minisign("-S", "-s", str(key_path), "-m", str(data_file), "-x", str(theirs), stdin="pw one\n")
    (sig,) = parse_signatures(theirs.read_text())
    assert sig.algorithm == b"ED"
    assert "\t" in sig.trusted_comment  # minisign's default "timestamp:...\tfile:...\thashed"
    verify_signature(sig, pk, file_blake2b=DIGEST)
    # We sign with minisign's (decrypted) key; minisign verifies.
    ours = tmp_path / "ours.minisig"
    ours.write_text(sign_prehashed(sk, DIGEST, TC))
    run_minisign("-Vm", str(data_file), "-x", str(ours), "-p", str(pub_path))


@needs_minisign
def test_minisign_generated_unencrypted_key(tmp_path: Path, data_file: Path) -> None:
    pub_path, key_path = tmp_path / "w.pub", tmp_path / "w.key"
    run_minisign("-G", "-W", "-p", str(pub_path), "-s", str(key_path))
    sk = read_secret_key(key_path, no_password)
    pk = read_public_key(pub_path)
    assert sk.public_key() == pk
    theirs = tmp_path / "theirs.minisig"
    run_minisign("-S", "-s", str(key_path), "-m", str(data_file), "-x", str(theirs))
    (sig,) = parse_signatures(theirs.read_text())
    assert sig.algorithm == b"ED"
    verify_signature(sig, pk, file_blake2b=DIGEST)
    ours = tmp_path / "ours.minisig"
    ours.write_text(sign_prehashed(sk, DIGEST, TC))
    run_minisign("-Vm", str(data_file), "-x", str(ours), "-P", pk.to_base64())
    # minisign's legacy mode (-l) gives 'Ed', which we refuse.
    legacy = tmp_path / "legacy.minisig"
    run_minisign("-S", "-l", "-s", str(key_path), "-m", str(data_file), "-x", str(legacy))
    (old,) = parse_signatures(legacy.read_text())
    assert old.algorithm == b"Ed"
    with pytest.raises(SignatureError, match="legacy"):
        verify_signature(old, pk, file_blake2b=DIGEST)


@needs_minisign
def test_appended_signature_blocks_with_minisign(
    tmp_path: Path, data_file: Path, key_a: SecretKey, key_b: SecretKey
) -> None:
    """Stock minisign verifies the first block of a multi-block file and ignores the rest."""
    pub_a, pub_b = tmp_path / "a.pub", tmp_path / "b.pub"
    pub_a.write_text(key_a.public_key().to_text())
    pub_b.write_text(key_b.public_key().to_text())
    sig_path = tmp_path / "bundle.minisig"
    sig_path.write_text(sign_prehashed(key_a, DIGEST, TC) + sign_prehashed(key_b, DIGEST, TC))
    run_minisign("-Vm", str(data_file), "-x", str(sig_path), "-p", str(pub_a))
    second = run_minisign("-Vm", str(data_file), "-x", str(sig_path), "-p", str(pub_b), check=False)
    assert second.returncode != 0 and "key id" in second.stderr  # minisign only reads block 1
    sigs = parse_signatures(sig_path.read_bytes())
    assert len(sigs) == 2
    trust = trust_of(key_a.public_key(), key_b.public_key())
    assert len(check_policy(sigs, trust, file_blake2b=DIGEST, threshold=2)) == 2


# the key only in a fresh signing process, after all other people's code has exited ---------
def _build(recipe: Path, key: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from lockbuild.cli import main

    r = CliRunner().invoke(main, ["build", str(recipe), "--key", str(key), "--out", str(out), "--json", *extra])
    return r.exit_code, r.stdout, r.stderr


def test_build_reads_the_key_only_in_a_fresh_signing_process(
    env: object, keys: object, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's own process never decrypts the key (reading it there raises), and the bundle is signed
    by the key all the same: the signing process did it."""
    import json

    from lockbuild.minisign import keyfiles

    def never(*_a: object, **_k: object) -> None:
        raise AssertionError("the build's own process read the secret key")

    monkeypatch.setattr(keyfiles, "read_secret_key", never)
    monkeypatch.setattr(signing, "read_secret_key", never)
    code, out, err = _build(toy_recipe, keys.secret, tmp_path / "d")  # type: ignore[attr-defined]
    assert code == 0, err
    bundle = Path(json.loads(out)["bundles"][0]["bundle"])
    store = load_trust_dir(keys.trust)  # type: ignore[attr-defined]
    from lockbuild.trust.opener import open_bundle

    open_bundle(bundle, store)  # the signature verifies against the release key


def test_the_self_test_runs_before_the_key_is_read(
    env: object, keys: object, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build --self-test: the self-test (the engine, the recipe's commands) runs on the unsigned bundle and
    has ended before the signing process starts; a self-test that stops the build means no key is read."""
    from lockbuild.selftest import run as selftest_run
    from lockbuild.trust import sign as sign_mod

    order: list[str] = []

    def fake_self_test(bundle: Path, options: object, progress: object = None) -> None:
        order.append("self-test")
        assert not list(tmp_path.joinpath("d").glob("*.minisig"))  # nothing signed yet
        raise SignatureError("stopped by the test")

    real = sign_mod.sign_in_fresh_process
    monkeypatch.setattr(selftest_run, "self_test", fake_self_test)
    monkeypatch.setattr(
        sign_mod, "sign_in_fresh_process", lambda *a, **k: (order.append("sign" if a[1] else "check"), real(*a, **k))[1]
    )
    code, _, err = _build(toy_recipe, keys.secret, tmp_path / "d", "--self-test")  # type: ignore[attr-defined]
    assert code == 3 and "stopped by the test" in err
    assert order == ["check", "self-test"]  # the key's check (signs nothing) comes before any third-party code
    assert list(tmp_path.joinpath("d").iterdir()) == []  # nothing left behind: no bundle, no signature


def test_the_signing_process_loads_no_pth_and_no_planted_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signing process runs ``python -I -S`` of an installation whose site-packages holds a planted
    ``.pth`` and ``getpass.py`` (what a hostile build backend could write): neither runs, the key signs."""
    import sys

    from lockbuild.trust import sign as sign_mod

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    marker = tmp_path / "planted-ran"
    (site / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w').write('pth')\n")
    (site / "getpass.py").write_text(f"open({str(marker)!r}, 'w').write('getpass')\n")
    secret, _ = signing.write_keypair(tmp_path / "k", password="correct horse")
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    real_dirs = sign_mod._import_dirs()
    monkeypatch.setattr(sign_mod, "_import_dirs", lambda: [str(site), *real_dirs])  # planted dir first
    got = sign_mod.sign_in_fresh_process(secret, [(b"\1" * 64, "trusted")], password="correct horse")
    assert len(got.blocks) == 1 and got.blocks[0].startswith("untrusted comment: lockbuild signature")
    assert not marker.exists()


def test_a_late_import_in_the_signing_process_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from lockbuild.trust import sign as sign_mod

    answer = {
        "key_id": "00" * 8,
        "key_id_hex": "0" * 16,
        "public_key": "x",
        "blocks": ["b"],
        "imported_after_key": ["evilmodule"],
    }

    class Answered:  # the signing process, as started by sign_mod._start, answering at once
        returncode = 0

        def communicate(self, _input: bytes, timeout: float) -> tuple[bytes, None]:
            return json.dumps(answer).encode(), None

    monkeypatch.setattr(sign_mod, "_start", Answered)
    with pytest.raises(SignatureError, match="imported evilmodule after it read the secret key"):
        sign_mod.sign_in_fresh_process(tmp_path / "k.key", [(b"\1" * 64, "t")], password=None)


def test_the_signing_process_reports_what_it_imported_after_the_key(tmp_path: Path) -> None:
    from lockbuild.trust import signproc

    secret, _ = signing.write_keypair(tmp_path / "k", password=None)
    got = signproc.answer({"key": str(secret), "password": None, "items": [{"blake2b": "01" * 64, "comment": "t"}]})
    assert got["imported_after_key"] == []


def test_a_typed_passphrase_needs_a_terminal_in_the_signing_process(tmp_path: Path) -> None:
    from lockbuild.trust.sign import sign_in_fresh_process

    secret, _ = signing.write_keypair(tmp_path / "k", password="pw")
    with pytest.raises(SignatureError, match="no terminal to ask for its passphrase"):
        sign_in_fresh_process(secret, [(b"\1" * 64, "t")], password=None)  # no /dev/tty for the child here


def test_a_secret_key_readable_by_others_is_refused_unless_allowed(
    env: object, keys: object, toy_recipe: Path, tmp_path: Path
) -> None:
    key = tmp_path / "shared.key"
    shutil.copy(keys.secret, key)  # type: ignore[attr-defined]
    key.chmod(0o644)
    code, _, err = _build(toy_recipe, key, tmp_path / "d")
    assert code == 3
    assert f"the secret key {key} has mode 0644: expected it readable by its owner alone (0600)" in err
    assert "chmod 600" in err and "--allow-readable-key" in err
    assert not (tmp_path / "d").exists() or list((tmp_path / "d").iterdir()) == []
    code, _, err = _build(toy_recipe, key, tmp_path / "d", "--allow-readable-key")
    assert code == 0, err


def test_lockbuild_sign_refuses_a_readable_key_too(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from lockbuild.cli import main

    secret, _ = signing.write_keypair(tmp_path / "k", password=None)
    secret.chmod(0o640)
    bundle = tmp_path / "x.lbz"
    bundle.write_bytes(b"not a bundle")
    r = CliRunner().invoke(main, ["sign", str(bundle), "--key", str(secret)])
    assert r.exit_code == 3 and "has mode 0640" in r.stderr


def test_a_passphrase_error_names_no_character_and_no_position(tmp_path: Path) -> None:
    secret, _ = signing.write_keypair(tmp_path / "k", password="right")
    with pytest.raises(SignatureError) as exc:
        signing.read_secret_key(secret, lambda: "wr\udcffong")
    text = exc.value.message + (exc.value.tip or "")
    assert "not valid UTF-8" in text
    assert "position" not in text and "\\udcff" not in text and "\udcff" not in text


def test_doctor_warns_when_lockbuilds_own_installation_is_writable(
    keys: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build backend or engine that could write lockbuild's installation would run in the next command,
    the one that asks for the passphrase: doctor says so (text and --json), and is quiet when it cannot."""
    import json
    import sys

    from click.testing import CliRunner

    import lockbuild
    from lockbuild.cli import main
    from lockbuild.install import survey as doctor

    script_dir = tmp_path / "bin"
    script_dir.mkdir()
    monkeypatch.setattr(sys, "path", [str(script_dir), *sys.path[1:]])
    package = Path(lockbuild.__file__).resolve().parent
    writable = {str(package), str(script_dir)}
    monkeypatch.setattr(doctor, "writable_here", lambda p: str(p) in writable)
    args = ["doctor", "--root", str(tmp_path / "engines"), "--trust", str(keys.trust)]  # type: ignore[attr-defined]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.stderr
    own = json.loads(r.stdout)["lockbuild"]
    assert own["writable"] == {"package": str(package), "sys.path[0]": str(script_dir)}
    assert len(own["warnings"]) == 2
    r = CliRunner().invoke(main, args)
    assert f"lockbuild   WARNING: lockbuild's package directory {package} is writable by this user" in r.stdout
    assert f"lockbuild's sys.path[0] directory {script_dir} is writable" in r.stdout
    assert "a venv owned by root or another user, or uv tool / pipx under another account" in r.stdout
    writable.clear()
    r = CliRunner().invoke(main, args)
    assert "WARNING: lockbuild" not in r.stdout and f"lockbuild   {package}: not writable by this user" in r.stdout
