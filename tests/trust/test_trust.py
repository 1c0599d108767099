"""The site's trust policy over a whole bundle file (lockbuild.trust): thresholds, dates, expiry, the
node's clock, renamed or swapped bundles, revoked keys, and trust stores that fail closed.

Signature format details (parsing, interop with minisign) are tested in tests/minisign/test_signing.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile import AS_OF, GOOD_FILES, TarEntry, bundle_tar, compress, manifest, member
from hypothesis import given, settings
from hypothesis import strategies as st

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.write import Entry, write_bundle
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.minisign import SecretKey, read_secret_key, sign_prehashed, write_keypair
from lockbuild.trust import (
    FileDigests,
    Policy,
    Statement,
    TrustedBundle,
    build_store,
    check_dates,
    digest_signed_file,
    evaluate,
    format_trusted_comment,
    load_trust_store,
    open_bundle,
    parse_policy,
    read_signatures,
    sign_statement,
    signature_path,
)
from lockbuild.trust.truststore import POLICY_FILE


def signature_block(
    key: SecretKey, name: str, digests: FileDigests, m: Manifest, *, expires: dt.datetime | None = None
) -> str:
    """One signature block over bundle ``name``, as ``lockbuild build`` and ``sign`` make it (the signed statement)."""
    statement = Statement.of(
        m, name=name, sha256=digests.whole, size=digests.size, expires=expires, frames_sha256=digests.frames_sha256
    )
    return sign_statement(key, statement, digests.blake2b)


NOW = AS_OF + dt.timedelta(days=3)


@dataclass(frozen=True)
class Signer:
    key: SecretKey
    pub: Path


def signer(base: Path, name: str) -> Signer:
    base.mkdir(parents=True, exist_ok=True)
    secret, public = write_keypair(base / name, password=None)
    return Signer(read_secret_key(secret, lambda: ""), public)


@pytest.fixture(scope="module")
def signers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Signer]:
    base = tmp_path_factory.mktemp("signers")
    return {name: signer(base, name) for name in ("alice", "bob", "mallory")}


def make_bundle(directory: Path, payload: bytes = b"weights", *, framed: bool = True) -> tuple[Path, Manifest]:
    files = [(p, payload if k == "asset" else d, k) for p, d, k in GOOD_FILES]
    m = manifest([member(p, d, k) for p, d, k in files])
    directory.mkdir(parents=True, exist_ok=True)
    bundle = directory / m.bundle_name
    out = io.BytesIO()
    entries = [Entry(mm, d) for mm, (_, d, _) in zip(m.members, files, strict=True)]
    write_bundle(out, m, entries, threads=1, framed=framed)
    bundle.write_bytes(out.getvalue())
    return bundle, m


def sign(bundle: Path, m: Manifest, *keys: Signer, expires: dt.datetime | None = None) -> None:
    """Write the .minisig: one block per key, in order (the first is what stock minisign checks)."""
    blocks = [signature_block(k.key, bundle.name, digest_signed_file(bundle), m, expires=expires) for k in keys]
    signature_path(bundle).write_text("".join(blocks), encoding="utf-8")


def trust_dir(base: Path, *keys: Signer, policy: str | None = None, revoked: str | None = None) -> Path:
    d = base / "trust"
    d.mkdir(parents=True)
    for k in keys:
        shutil.copyfile(k.pub, d / k.pub.name)
    if policy is not None:
        (d / "policy.toml").write_text(policy)
    if revoked is not None:
        (d / "revoked.txt").write_text(revoked)
    return d


def verify(bundle: Path, trust: Path, *, now: dt.datetime = NOW, threshold: int | None = None) -> TrustedBundle:
    return open_bundle(bundle, load_trust_store(trust), threshold=threshold, now=now)


def test_a_signed_bundle_verifies(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    got = verify(bundle, trust_dir(tmp_path, signers["alice"]))
    assert [k.key_id for k in got.signers] == [signers["alice"].key.key_id]
    d = digest_signed_file(bundle)
    assert got.statement == Statement(
        m.bundle_name,
        "toyengine",
        "1.0",
        "cpu",
        d.whole,
        d.size,
        hashlib.sha256(m.to_toml()).hexdigest(),
        m.serial,
        frames_sha256=d.frames_sha256,
    )
    assert got.digests is not None and got.digests.sha256 is None, "the node does not hash a framed file whole"
    assert got.digests.size == bundle.stat().st_size
    assert got.manifest == m
    assert got.extract().manifest == m


# --- the trust store fails closed -----------------------------------------------------------------


def test_empty_trust_dir_fails_closed(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    with pytest.raises(SignatureError, match=r"holds no \*\.pub files"):
        verify(bundle, trust_dir(tmp_path))


def test_missing_trust_dir_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match="does not exist"):
        load_trust_store(tmp_path / "nowhere")


def test_malformed_key_in_the_trust_dir_fails_closed(tmp_path: Path, signers: dict[str, Signer]) -> None:
    trust = trust_dir(tmp_path, signers["alice"])
    (trust / "broken.pub").write_text("untrusted comment: x\nnot base64\n")
    with pytest.raises(SignatureError, match="malformed public key in trust directory"):
        load_trust_store(trust)


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ("threshold = 0\n", "threshold must be a whole number of at least 1, found the number 0"),
        ("threshold = true\n", "threshold must be a whole number"),
        ("threshold = 1\nthreshhold = 2\n", "unknown keys \\['threshhold'\\]"),
        ("not-before = 2025-01-01T00:00:00\n", "not-before must be a time with a zone"),
        ('not-after = "tomorrow"\n', "not-after must be a time with a zone"),
        ("threshold = [\n", "is not valid TOML"),
    ],
    ids=["zero", "bool", "typo", "local-time", "string", "toml"],
)
def test_malformed_policy_fails_closed(tmp_path: Path, signers: dict[str, Signer], policy: str, why: str) -> None:
    trust = trust_dir(tmp_path, signers["alice"], policy=policy)
    with pytest.raises(SignatureError, match=why) as exc:
        load_trust_store(trust)
    assert exc.value.tip and "policy.toml takes" in exc.value.tip


def test_no_signature_file(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, _ = make_bundle(tmp_path / "dist")
    with pytest.raises(SignatureError, match=r"no signature file .*\.lbz\.minisig"):
        verify(bundle, trust_dir(tmp_path, signers["alice"]))


# --- thresholds -----------------------------------------------------------------------------------


def test_policy_threshold_needs_distinct_keys(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    trust = trust_dir(tmp_path, signers["alice"], signers["bob"], policy="threshold = 2\n")
    sign(bundle, m, signers["alice"])
    with pytest.raises(SignatureError, match=r"needed 2 valid signature\(s\) .* found 1"):
        verify(bundle, trust)
    sign(bundle, m, signers["alice"], signers["alice"])
    with pytest.raises(SignatureError, match="the same key counts once"):
        verify(bundle, trust)
    sign(bundle, m, signers["alice"], signers["bob"])
    assert len(verify(bundle, trust).signers) == 2


def test_untrusted_signer_does_not_count(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    trust = trust_dir(tmp_path, signers["alice"], signers["bob"], policy="threshold = 2\n")
    sign(bundle, m, signers["alice"], signers["mallory"])
    with pytest.raises(SignatureError, match="which is not in the trust store"):
        verify(bundle, trust)


def test_threshold_option_only_raises_the_policy(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    trust = trust_dir(tmp_path, signers["alice"], signers["bob"], policy="threshold = 1\n")
    assert verify(bundle, trust, threshold=1).signers
    with pytest.raises(SignatureError, match=r"needed 2 valid signature\(s\)"):
        verify(bundle, trust, threshold=2)
    trust2 = tmp_path / "t2"
    shutil.copytree(trust, trust2)
    (trust2 / "policy.toml").write_text("threshold = 2\n")
    with pytest.raises(SignatureError, match=r"needed 2 valid signature\(s\)"):
        verify(bundle, trust2, threshold=1)  # a lower --threshold does not weaken the site's policy


# --- revocation -----------------------------------------------------------------------------------


def test_revoked_key_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    alice = signers["alice"].key.key_id_hex
    trust = trust_dir(tmp_path, signers["alice"], revoked=f"# compromised 2025-02-01\n{alice}\n")
    with pytest.raises(SignatureError, match=f"key {alice}\\) is from a revoked key"):
        verify(bundle, trust)


def test_revoking_one_of_two_keys_leaves_the_other(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"], signers["bob"])
    trust = trust_dir(tmp_path, signers["alice"], signers["bob"], revoked=signers["alice"].key.key_id_hex + "\n")
    got = verify(bundle, trust)
    assert [k.key_id for k in got.signers] == [signers["bob"].key.key_id]


def test_malformed_revocation_list_fails_closed(tmp_path: Path, signers: dict[str, Signer]) -> None:
    trust = trust_dir(tmp_path, signers["alice"], revoked="not-a-key-id\n")
    with pytest.raises(SignatureError, match=r"revoked\.txt line 1"):
        load_trust_store(trust)


# --- dates ----------------------------------------------------------------------------------------


def test_policy_not_before_refuses_older_bundles(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    trust = trust_dir(tmp_path, signers["alice"], policy="not-before = 2025-02-01T00:00:00Z\n")
    with pytest.raises(SignatureError, match="as-of 2025-01-06T00:00:00Z is before the site's not-before 2025-02-01"):
        verify(bundle, trust, now=dt.datetime(2025, 3, 1, tzinfo=dt.UTC))


def test_policy_not_after_refuses_newer_bundles(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    trust = trust_dir(tmp_path, signers["alice"], policy="not-after = 2025-01-05T00:00:00Z\n")
    with pytest.raises(SignatureError, match="as-of 2025-01-06T00:00:00Z is after the site's not-after 2025-01-05"):
        verify(bundle, trust)


def test_policy_dates_that_hold(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    policy = "not-before = 2025-01-06T00:00:00Z\nnot-after = 2025-01-06T00:00:00Z\n"
    assert verify(bundle, trust_dir(tmp_path, signers["alice"], policy=policy)).signers


def test_check_dates_bounds_are_inclusive() -> None:
    serial = int(AS_OF.timestamp())

    def at(s: int) -> Statement:
        return Statement("b.lbz", "e", "1", "cpu", "0" * 64, 1, "1" * 64, s)

    check_dates(at(serial), Policy(not_before=AS_OF, not_after=AS_OF))
    with pytest.raises(SignatureError, match="before the site's not-before"):
        check_dates(at(serial - 1), Policy(not_before=AS_OF))
    with pytest.raises(SignatureError, match="after the site's not-after"):
        check_dates(at(serial + 1), Policy(not_after=AS_OF))


def test_expired_signature(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    expires = AS_OF + dt.timedelta(days=30)
    sign(bundle, m, signers["alice"], expires=expires)
    trust = trust_dir(tmp_path, signers["alice"])
    assert verify(bundle, trust, now=expires - dt.timedelta(seconds=1)).statement.expires == expires
    with pytest.raises(SignatureError, match=r"expired at 2025-02-05T00:00:00Z \(now 2025-02-05T00:00:00Z\)"):
        verify(bundle, trust, now=expires)


def test_an_expired_signature_does_not_count_but_a_current_one_does(tmp_path: Path, signers: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    expires = AS_OF + dt.timedelta(days=30)
    blocks = [
        signature_block(signers["alice"].key, bundle.name, digest_signed_file(bundle), m, expires=expires),
        signature_block(signers["bob"].key, bundle.name, digest_signed_file(bundle), m),
    ]
    signature_path(bundle).write_text("".join(blocks), encoding="utf-8")
    trust = trust_dir(tmp_path, signers["alice"], signers["bob"])
    later = expires + dt.timedelta(days=1)
    assert len(verify(bundle, trust, now=later).signers) == 1
    with pytest.raises(SignatureError, match=r"needed 2 valid signature\(s\) .* found 1 .* expired at 2025-02-05"):
        verify(bundle, trust, now=later, threshold=2)
    assert len(verify(bundle, trust, now=expires - dt.timedelta(days=1), threshold=2).signers) == 2


def test_node_clock_before_the_bundle_time(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A node whose clock is behind would accept an expired signature forever: refused, outside a
    10-minute allowance for skew."""
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"], expires=AS_OF + dt.timedelta(days=30))
    trust = trust_dir(tmp_path, signers["alice"])
    assert verify(bundle, trust, now=AS_OF - dt.timedelta(minutes=9)).signers
    with pytest.raises(
        SignatureError, match=r"is from 2025-01-06T00:00:00Z, after this machine's clock \(2025-01-05T00:00:00Z\)"
    ):
        verify(bundle, trust, now=AS_OF - dt.timedelta(days=1))


# --- the file the signature names -----------------------------------------------------------------


def test_renamed_bundle_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A bundle moved to another name (say, to pass for another variant) with its signature."""
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    renamed = bundle.with_name("toyengine-1.0-cu128-x86_64-manylinux_2_28.lbz")
    bundle.rename(renamed)
    signature_path(bundle).rename(signature_path(renamed))
    with pytest.raises(SignatureError, match=f"is for '{m.bundle_name}', but the bundle file is named"):
        verify(renamed, trust_dir(tmp_path, signers["alice"]))


def test_signature_for_another_bundle_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """Same name, other bytes: the signature of the real bundle beside a swapped one."""
    real, m = make_bundle(tmp_path / "real")
    sign(real, m, signers["alice"])
    swapped, _ = make_bundle(tmp_path / "dist", payload=b"trojan")
    shutil.copyfile(signature_path(real), signature_path(swapped))
    with pytest.raises(SignatureError, match="does not verify"):
        verify(swapped, trust_dir(tmp_path, signers["alice"]))


def test_flipped_byte_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A byte of a frame: its sha256 is not the signed table's, refused before it is decompressed; a byte of
    the frame tables: they are not the signed ones, so no signature counts."""
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    good = bundle.read_bytes()
    data = bytearray(good)
    data[len(data) // 4] ^= 1
    bundle.write_bytes(bytes(data))
    trust = trust_dir(tmp_path, signers["alice"])
    with pytest.raises(IntegrityError, match=r"frame 0 .* does not have the sha256 its signed frame table lists"):
        verify(bundle, trust)
    data = bytearray(good)
    data[-30] ^= 1  # in the seek table's entries
    bundle.write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="does not verify: it signs frame tables of sha256"):
        verify(bundle, trust)


def custom_signature(bundle: Path, key: SecretKey, **fields: str) -> None:
    """A valid signature whose trusted comment carries exactly ``fields`` (over the file's defaults)."""
    d = digest_signed_file(bundle)
    m = manifest([member(p, d, k) for p, d, k in GOOD_FILES])
    base = {
        "file": bundle.name,
        "engine": "toyengine",
        "version": "1.0",
        "variant": "cpu",
        "sha256": d.sha256,
        "size": str(d.size),
        "manifest-sha256": hashlib.sha256(m.to_toml()).hexdigest(),
        "serial": str(int(AS_OF.timestamp())),
        "frames-sha256": d.frames_sha256 or "-",
    }
    base.update(fields)
    comment = format_trusted_comment({k: v for k, v in base.items() if v != "-"})
    signature_path(bundle).write_text(sign_prehashed(key, d.blake2b, comment))


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"file": "-"}, "lacks file"),
        ({"size": "-"}, "lacks size: it was made by an older lockbuild, which did not sign the manifest"),
        ({"manifest-sha256": "-"}, "lacks manifest-sha256: it was made by an older lockbuild"),
        ({"manifest-sha256": "AB" * 32}, "the signed manifest-sha256 'ABAB.* is not a sha256"),
        ({"extra": "1"}, "fields this lockbuild does not know: extra"),
        ({"serial": "soon"}, "the signed serial 'soon' is not a number"),
        ({"serial": "\u00b2"}, "the signed serial '²' is not a number"),
        ({"serial": "9" * 40}, "is not a number of seconds"),
        ({"serial": "-"}, "lacks serial"),
        ({"expires": "never"}, "the signed expiry 'never' is not a time with a zone"),
        ({"expires": "2030-01-01T00:00:00"}, "is not a time with a zone"),
    ],
    ids=[
        "no-file",
        "no-size",
        "no-manifest",
        "manifest-upper",
        "unknown",
        "serial-word",
        "serial-superscript",
        "serial-huge",
        "no-serial",
        "expiry-word",
        "expiry-local",
    ],
)
def test_signed_fields_that_do_not_hold(
    tmp_path: Path, signers: dict[str, Signer], fields: dict[str, str], why: str
) -> None:
    """Signed by a trusted key, yet the statement is wrong or unreadable: it does not count (SignatureError,
    saying why), and the bundle is not opened."""
    bundle, _ = make_bundle(tmp_path / "dist")
    custom_signature(bundle, signers["alice"].key, **fields)
    with pytest.raises(SignatureError, match="signature policy not met") as exc:
        verify(bundle, trust_dir(tmp_path, signers["alice"]))
    assert re.search(why, exc.value.message), exc.value.message


@pytest.mark.parametrize(
    ("fields", "framed", "why"),
    [
        ({"sha256": "0" * 64}, False, "it signs sha256 0000"),
        ({"size": "12"}, True, "it signs a file of 12 bytes; this one has"),
        ({"frames-sha256": "0" * 64}, True, "it signs frame tables of sha256 0000"),
        ({"frames-sha256": "-"}, True, "it signs no frame table; this file carries one"),
        ({"frames-sha256": "0" * 64}, False, "it signs a framed bundle; this file has no frame table"),
    ],
    ids=["sha256", "size", "frames-sha256", "no-frames-sha256", "not-framed"],
)
def test_a_statement_for_this_file_with_other_digests_does_not_verify(
    tmp_path: Path, signers: dict[str, Signer], fields: dict[str, str], framed: bool, why: str
) -> None:
    """The statement's sha256 (a bundle made before frames) or its frame tables' sha256 (a framed one), and
    its size, are what bind the file (the node does not compute minisign's BLAKE2b prehash): a trusted
    statement that names this file with another digest or size is the same hard failure as a bad file
    signature, even where the ED file signature itself holds."""
    bundle, _ = make_bundle(tmp_path / "dist", framed=framed)
    custom_signature(bundle, signers["alice"].key, **fields)
    trust = trust_dir(tmp_path, signers["alice"])
    with pytest.raises(SignatureError, match="does not verify") as exc:
        verify(bundle, trust)
    assert why in exc.value.message and "altered" in (exc.value.tip or ""), exc.value
    store = load_trust_store(trust)
    blocks = read_signatures(signature_path(bundle))
    with pytest.raises(SignatureError, match="does not verify"):  # the same with the prehash known
        evaluate(blocks, store, name=bundle.name, now=NOW, file=digest_signed_file(bundle, prehash=True))


def test_the_node_binds_the_file_by_the_signed_sha256_alone(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """open_bundle hashes a file made before frames with sha256 only; the statement under the global
    signature binds it (a framed one: its frame tables, test_flipped_byte_is_refused)."""
    bundle, m = make_bundle(tmp_path / "dist", framed=False)
    sign(bundle, m, signers["alice"])
    d = digest_signed_file(bundle, prehash=False)
    assert d.blake2b is None and d == dataclasses.replace(digest_signed_file(bundle), blake2b=None)
    got = verify(bundle, trust_dir(tmp_path, signers["alice"]))
    assert got.digests == d and got.statement.sha256 == d.sha256 and got.statement.size == d.size


def test_policy_dates_may_be_quoted(tmp_path: Path) -> None:
    policy = parse_policy('not-before = "2025-01-01T00:00:00Z"\nthreshold = 2\n')
    assert policy.not_before == dt.datetime(2025, 1, 1, tzinfo=dt.UTC) and policy.threshold == 2
    with pytest.raises(SignatureError, match="must be a time with a zone"):
        parse_policy('not-before = "2025-01-01"\n')


# --- the trust path ---------------------------------------------------------------

MINISIGN = shutil.which("minisign")


def test_a_signature_block_alone_proves_the_manifest(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """No bundle file (a store, a delta, a registry): the global signature covers the statement, so the
    blocks alone prove the manifest's digest; other bytes are refused, and an edited digest breaks the
    global signature. The two steps ``open_source`` takes for such a source: evaluate, then signed_manifest."""
    from lockbuild.minisign import parse_signatures
    from lockbuild.trust.policy import evaluate, signed_manifest

    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    blocks = parse_signatures(signature_path(bundle).read_bytes())
    bundle.unlink()
    store = load_trust_store(trust_dir(tmp_path, signers["alice"]))
    statement = evaluate(blocks, store, name=None, now=NOW).require()
    assert signed_manifest(statement, m.to_toml()) == m
    assert statement.manifest_sha256 == hashlib.sha256(m.to_toml()).hexdigest()
    tampered = m.to_toml().replace(b'variant = "cpu"', b'variant = "gpu"')
    with pytest.raises(IntegrityError, match=r"manifest has sha256 .* the signatures sign"):
        signed_manifest(statement, tampered)
    # Editing the signed digest in the block itself breaks the global signature: no statement counts.
    forged = signature_path(bundle).read_text().replace(statement.manifest_sha256, hashlib.sha256(tampered).hexdigest())
    with pytest.raises(SignatureError, match="global signature"):
        evaluate(parse_signatures(forged), store, name=None, now=NOW).require()


def test_signed_metadata_must_match_the_manifest(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """check_signed_metadata: a statement that signs the right manifest digest but other fields is refused."""
    from lockbuild.trust import check_signed_metadata, sign_statement

    bundle, m = make_bundle(tmp_path / "dist")
    d = digest_signed_file(bundle)
    good = Statement.of(m, name=bundle.name, sha256=d.sha256, size=d.size, expires=None, frames_sha256=d.frames_sha256)
    for field, value in (("engine", "other"), ("version", "2.0"), ("variant", "gpu"), ("serial", m.serial + 1)):
        bad = dataclasses.replace(good, **{field: value})
        with pytest.raises(SignatureError, match=f"the signature says {field}="):
            check_signed_metadata(bad, m)
        signature_path(bundle).write_text(sign_statement(signers["alice"].key, bad, d.blake2b))
        with pytest.raises(SignatureError, match=f"the signature says {field}="):
            verify(bundle, trust_dir(tmp_path / field, signers["alice"]))
    check_signed_metadata(good, m)


@pytest.mark.skipif(MINISIGN is None, reason="the minisign binary is not installed")
def test_stock_minisign_cosignature_does_not_veto(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A trusted co-signer who used stock `minisign -S` (trusted comment 'timestamp:... file:...') does not
    count, and never vetoes the lockbuild signature that does."""
    assert MINISIGN is not None
    bundle, m = make_bundle(tmp_path / "dist")
    pub, sec = tmp_path / "stock.pub", tmp_path / "stock.key"
    subprocess.run([MINISIGN, "-G", "-W", "-p", str(pub), "-s", str(sec)], check=True, capture_output=True)
    theirs = tmp_path / "theirs.minisig"
    subprocess.run(
        [MINISIGN, "-S", "-s", str(sec), "-m", str(bundle), "-x", str(theirs)], check=True, capture_output=True
    )
    ours = signature_block(signers["alice"].key, bundle.name, digest_signed_file(bundle), m)
    signature_path(bundle).write_text(theirs.read_text() + ours)
    trust = trust_dir(tmp_path, signers["alice"])
    shutil.copyfile(pub, trust / "stock.pub")
    got = verify(bundle, trust)
    assert [k.key_id for k in got.signers] == [signers["alice"].key.key_id]
    stock = got.evaluation.verdicts[0]
    assert not stock.counts and "carries no lockbuild statement" in stock.reason
    with pytest.raises(SignatureError, match="carries no lockbuild statement"):
        verify(bundle, trust, threshold=2)


def test_a_truncated_bundle_is_reported_as_incomplete(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A short copy is an IntegrityError (exit 4) that says how much arrived, not 'tampering'."""
    bundle, m = make_bundle(tmp_path / "dist", payload=os.urandom(300_000))
    sign(bundle, m, signers["alice"])
    size = bundle.stat().st_size
    with bundle.open("r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(IntegrityError, match=f"the file has {size // 2:,} bytes of {size:,} bytes: the copy") as exc:
        verify(bundle, trust_dir(tmp_path, signers["alice"]))
    assert exc.value.exit_code == 4 and "Copy the bundle again" in (exc.value.tip or "")


def test_the_same_key_twice_in_the_trust_dir_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """One raw key under two files, or under two key ids, would count twice."""
    from lockbuild.minisign import PublicKey, read_public_key

    alice = read_public_key(signers["alice"].pub)
    trust = trust_dir(tmp_path / "a", signers["alice"])
    (trust / "copy.pub").write_text(alice.to_text())
    with pytest.raises(SignatureError, match="holds the same public key as"):
        load_trust_store(trust)
    trust = trust_dir(tmp_path / "b", signers["alice"])
    (trust / "other-id.pub").write_text(PublicKey(b"\x01" * 8, alice.raw).to_text())
    with pytest.raises(SignatureError, match="a signer is its key, whatever its key id"):
        load_trust_store(trust)


def test_revoking_a_key_by_its_public_key_covers_it_under_any_id(tmp_path: Path, signers: dict[str, Signer]) -> None:
    from lockbuild.minisign import PublicKey, read_public_key

    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    alice = read_public_key(signers["alice"].pub)
    other_id = PublicKey(b"\x02" * 8, alice.raw).to_base64()  # the same key, published under another id
    trust = trust_dir(tmp_path, signers["alice"], revoked=f"{other_id}  # compromised\n")
    with pytest.raises(SignatureError, match="is from a revoked key"):
        verify(bundle, trust)


@pytest.mark.parametrize("kind", ["dangling-symlink", "directory", "symlink", "fifo"])
def test_a_policy_that_cannot_be_read_fails_closed(tmp_path: Path, signers: dict[str, Signer], kind: str) -> None:
    """Only a truly absent policy.toml means the defaults."""
    trust = trust_dir(tmp_path, signers["alice"])
    assert load_trust_store(trust).policy == Policy()
    target = trust / POLICY_FILE
    if kind == "dangling-symlink":
        target.symlink_to(tmp_path / "nowhere.toml")
    elif kind == "directory":
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "real.toml").write_text("threshold = 1\n")
        target.symlink_to(tmp_path / "real.toml")
    else:
        os.mkfifo(target)
    with pytest.raises(SignatureError, match="the trust store fails closed"):
        load_trust_store(trust)


def test_policy_errors_show_what_was_written_not_python(tmp_path: Path) -> None:
    """No datetime.date(2025, 1, 1) in a message, and a TIP."""
    with pytest.raises(SignatureError) as exc:
        parse_policy("not-before = 2025-01-01\n")
    assert "found a date without a time (2025-01-01)" in exc.value.message
    assert "datetime" not in exc.value.message and exc.value.tip


@pytest.mark.parametrize("kind", ["fifo", "symlink-to-device", "directory", "too-large"])
def test_the_bundle_must_be_a_bounded_regular_file(tmp_path: Path, signers: dict[str, Signer], kind: str) -> None:
    """A FIFO or a device would hang verify and install; refused before any read."""
    from lockbuild.limits import Limits

    bundle, m = make_bundle(tmp_path / "real")
    sign(bundle, m, signers["alice"])
    trust = load_trust_store(trust_dir(tmp_path, signers["alice"]))
    target = tmp_path / "dist" / bundle.name
    target.parent.mkdir()
    shutil.copyfile(signature_path(bundle), signature_path(target))
    limits = Limits()
    if kind == "fifo":
        os.mkfifo(target)
        why = "is a FIFO"
    elif kind == "symlink-to-device":
        target.symlink_to("/dev/zero")
        why = "is a symbolic link"
    elif kind == "directory":
        target.mkdir()
        why = "is a directory"
    else:
        shutil.copyfile(bundle, target)
        limits = Limits(max_bundle=1000)
        why = "expected at most 1000"
    with pytest.raises(IntegrityError, match=why):
        open_bundle(target, trust, now=NOW, limits=limits)


def test_the_signature_file_must_be_a_bounded_regular_file(tmp_path: Path, signers: dict[str, Signer]) -> None:
    from lockbuild.limits import Limits

    bundle, m = make_bundle(tmp_path / "dist")
    trust = load_trust_store(trust_dir(tmp_path, signers["alice"]))
    os.mkfifo(signature_path(bundle))
    with pytest.raises(SignatureError, match="is a FIFO"):
        open_bundle(bundle, trust, now=NOW)
    signature_path(bundle).unlink()
    sign(bundle, m, signers["alice"])
    with pytest.raises(SignatureError, match="expected at most 100"):  # Limits.max_signature_file is read
        open_bundle(bundle, trust, now=NOW, limits=Limits(max_signature_file=100))


def test_programming_mistakes_are_not_signature_errors(signers: dict[str, Signer]) -> None:
    from lockbuild.minisign import PublicKey
    from lockbuild.trust import evaluate

    with pytest.raises(ValueError):
        PublicKey(b"short", b"x" * 32)
    with pytest.raises(ValueError):
        Statement("b.lbz", "e", "1", "cpu", "not hex", 1, "1" * 64, 1)
    store = build_store([("a.pub", signers["alice"].key.public_key())], source="t")
    with pytest.raises(ValueError):
        evaluate([], store, name="b.lbz", now=NOW, threshold=0)


def test_sign_checks_the_bundle_and_the_existing_signatures(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """A co-signer's `sign` reads every member and checks what is already signed."""
    from lockbuild.trust import InMemorySigner, sign_bundle

    bundle, m = make_bundle(tmp_path / "dist", payload=os.urandom(50_000))
    sign(bundle, m, signers["alice"])
    store = load_trust_store(trust_dir(tmp_path, signers["alice"], signers["bob"]))
    res = sign_bundle(bundle, InMemorySigner(signers["bob"].key), store=store, now=NOW)
    assert res.to_json()["existing"]["signatures"][0]["counts"] and not res.replaced
    assert len(verify(bundle, tmp_path / "trust", threshold=2).signers) == 2
    # A damaged member (a well-formed zstd stream whose last member is not what the manifest lists):
    # refused, and the .minisig is left as it was.
    before = signature_path(bundle).read_bytes()
    entries = [TarEntry(p, b"trojan" * 100 if k == "asset" else d) for p, d, k in GOOD_FILES]
    bundle.write_bytes(compress(bundle_tar(entries, listed=m)))
    with pytest.raises(IntegrityError, match="assets/"):
        sign_bundle(bundle, InMemorySigner(signers["mallory"].key), now=NOW)
    assert signature_path(bundle).read_bytes() == before
    # An intact bundle whose existing trusted signature does not verify (another file's): refused with --trust.
    other, _ = make_bundle(tmp_path / "other", payload=os.urandom(50_000))
    shutil.copyfile(signature_path(bundle), signature_path(other))
    with pytest.raises(SignatureError, match="does not verify"):
        sign_bundle(other, InMemorySigner(signers["mallory"].key), store=store, now=NOW)


def test_a_statement_for_another_manifest_is_refused(tmp_path: Path, signers: dict[str, Signer]) -> None:
    """The file's digests hold, but the signed manifest digest is not this manifest's: refused (exit 4)."""
    from lockbuild.trust import sign_statement

    bundle, m = make_bundle(tmp_path / "dist")
    d = digest_signed_file(bundle)
    other = dataclasses.replace(
        Statement.of(m, name=bundle.name, sha256=d.sha256, size=d.size, expires=None, frames_sha256=d.frames_sha256),
        manifest_sha256="0" * 64,
    )
    signature_path(bundle).write_text(sign_statement(signers["alice"].key, other, d.blake2b))
    with pytest.raises(IntegrityError, match=r"the bundle's manifest has sha256 .* the signatures sign 0000"):
        verify(bundle, trust_dir(tmp_path, signers["alice"]))


@given(
    text=st.text(min_size=1, max_size=40),
    size=st.integers(min_value=0, max_value=10**15),
    serial=st.integers(min_value=0, max_value=4_000_000_000),
    expires=st.none()
    | st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(9000, 1, 1), timezones=st.just(dt.UTC)).map(
        lambda t: t.replace(microsecond=0)
    ),
)
@settings(max_examples=200, deadline=None)
def test_a_statement_reads_back_as_written(text: str, size: int, serial: int, expires: dt.datetime | None) -> None:
    """One definition: whatever pack/sign writes, verify reads back to the same statement."""
    statement = Statement(text, text, text, text, "a" * 64, size, "b" * 64, serial, expires)
    try:
        comment = statement.to_comment()
    except SignatureError:  # too long for minisign's comment line, or a line break: refused when signing
        return
    assert Statement.from_comment(comment) == statement
