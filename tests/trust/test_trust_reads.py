"""What the one trust decision reads, it reads bounded and once: the bundle and its ``.minisig`` are
refused by their own size before a byte is read (naming the file), and a bundle whose manifest changes
between the decision and the extraction is refused as changed, not extracted against the first one."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_trust import NOW, Signer, make_bundle, sign, trust_dir, verify
from test_trust import signers as signers  # the fixture: alice, bob and mallory

from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.limits import Limits
from lockbuild.trust import load_trust_store, open_bundle, read_signatures, signature_path


def test_a_bundle_over_max_bundle_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, signers: dict[str, Signer]
) -> None:
    """Before a byte is hashed: a signed bundle over the bound, altered since it was signed, is refused by
    its size, not hashed and then refused as altered."""
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    trust = load_trust_store(trust_dir(tmp_path, signers["alice"]))
    size = bundle.stat().st_size
    assert size < m.unpacked_size  # so the limit below is the file's own bound, not the unpacked size's
    assert open_bundle(bundle, trust, now=NOW, limits=Limits(max_bundle=m.unpacked_size)).manifest == m
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 1
    bundle.write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="does not verify"):
        open_bundle(bundle, trust, now=NOW)
    with pytest.raises(IntegrityError, match=rf"the bundle {bundle} is {size} bytes: expected at most {size - 1}\."):
        open_bundle(bundle, trust, now=NOW, limits=Limits(max_bundle=size - 1))


def test_a_signature_file_over_its_bound_is_refused_by_its_size_naming_it(
    tmp_path: Path, signers: dict[str, Signer]
) -> None:
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, signers["alice"])
    trust = load_trust_store(trust_dir(tmp_path, signers["alice"]))
    sig = signature_path(bundle)
    size = sig.stat().st_size
    with pytest.raises(SignatureError, match=rf"the signature file {sig} is {size} bytes: expected at most 100\."):
        open_bundle(bundle, trust, now=NOW, limits=Limits(max_signature_file=100))  # the bundle's own reader
    assert len(read_signatures(sig, Limits(max_signature_file=size))) == 1
    with pytest.raises(SignatureError, match=rf"the signature file {sig} is {size} bytes: expected at most 100\."):
        read_signatures(sig, Limits(max_signature_file=100))  # what delta and sign read .minisig files with


@pytest.mark.parametrize(
    ("framed", "why"),
    [(True, r"frame 0 .* does not have the sha256 its signed frame table lists"), (False, "changed while it was read")],
)
def test_a_bundle_whose_manifest_changes_after_the_decision_is_refused_as_changed(
    tmp_path: Path, signers: dict[str, Signer], framed: bool, why: str
) -> None:
    """A framed bundle: its first frame is not the signed table's, refused before it is decompressed; one made
    before frames: the manifest it carries again is not the signed one."""
    bundle, m = make_bundle(tmp_path / "dist", framed=framed)
    sign(bundle, m, signers["alice"])
    other, _ = make_bundle(tmp_path / "other", payload=b"other weights, another size", framed=framed)
    assert other.name == bundle.name
    opened = verify(bundle, trust_dir(tmp_path, signers["alice"]))
    bundle.write_bytes(other.read_bytes())  # swapped after the signatures were checked, before extraction
    dest = tmp_path / "out"
    with pytest.raises(IntegrityError, match=why):
        opened.extract(dest)
    assert not dest.exists() or list(dest.iterdir()) == []
