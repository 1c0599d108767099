"""How signatures count, seen through the one trust decision a user's command makes (``open_bundle``): a
legacy ``Ed`` block from a trusted key never counts, and two trusted groups that each meet the threshold
with different statements are a hard failure, never "the larger (or the first) group wins"."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_trust import NOW, Signer, make_bundle, signature_block, signer, trust_dir, verify

from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.minisign.sigfile import parse_signatures
from lockbuild.trust import digest_signed_file, signature_path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Signer]:
    base = tmp_path_factory.mktemp("votes")
    return {name: signer(base, name) for name in ("alice", "bob")}


def legacy_block(key: Signer, bundle: Path, m: Manifest) -> str:
    """A block with a valid lockbuild statement under a valid global signature, but of minisign's legacy
    ``Ed`` algorithm (a signature over the file itself, not its BLAKE2b-512 prehash)."""
    (good,) = parse_signatures(signature_block(key.key, bundle.name, digest_signed_file(bundle), m))
    raw = key.key.private.sign(bundle.read_bytes())
    global_signature = key.key.private.sign(raw + good.trusted_comment.encode())
    return dataclasses.replace(good, algorithm=b"Ed", signature=raw, global_signature=global_signature).to_text()


def test_a_legacy_ed_block_from_a_trusted_key_does_not_count(tmp_path: Path, keys: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "b")
    signature_path(bundle).write_text(legacy_block(keys["alice"], bundle, m), encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        verify(bundle, trust_dir(tmp_path, keys["alice"]), now=NOW)
    assert "signature policy not met" in err.value.message
    assert "uses the legacy non-prehashed 'Ed' algorithm, which is not accepted" in err.value.message


def test_a_legacy_ed_block_does_not_veto_a_good_one(tmp_path: Path, keys: dict[str, Signer]) -> None:
    # Not counting is not tampering: the legacy block is skipped, and the other trusted key's block counts.
    bundle, m = make_bundle(tmp_path / "b")
    good = signature_block(keys["bob"].key, bundle.name, digest_signed_file(bundle), m)
    signature_path(bundle).write_text(legacy_block(keys["alice"], bundle, m) + good, encoding="utf-8")
    opened = verify(bundle, trust_dir(tmp_path, keys["alice"], keys["bob"]), now=NOW)
    assert [v.counts for v in opened.evaluation.verdicts] == [False, True]


def test_two_trusted_groups_with_different_statements_are_refused(tmp_path: Path, keys: dict[str, Signer]) -> None:
    bundle, m = make_bundle(tmp_path / "b")
    digests = digest_signed_file(bundle)
    honest = signature_block(keys["alice"].key, bundle.name, digests, m)
    other = signature_block(keys["bob"].key, bundle.name, digests, dataclasses.replace(m, serial=m.serial + 1))
    signature_path(bundle).write_text(honest + other, encoding="utf-8")
    with pytest.raises(SignatureError, match="trusted signers sign different statements"):
        verify(bundle, trust_dir(tmp_path, keys["alice"], keys["bob"]), now=NOW)


@pytest.mark.parametrize("prehash", [True, False])
@pytest.mark.parametrize(("change", "said"), [("grow", "grew"), ("shrink", "shrank")])
def test_a_bundle_that_changes_while_it_is_hashed_is_refused(
    tmp_path: Path, prehash: bool, change: str, said: str
) -> None:
    # The size was checked against what trusted keys signed before a byte was read; the hash must cover
    # exactly that many bytes, so a file that grows or shrinks under the reader is refused, not hashed short.
    bundle, _ = make_bundle(tmp_path / "b")
    size = bundle.stat().st_size

    def meanwhile(checked: int) -> None:
        assert checked == size
        with bundle.open("r+b") as f:
            if change == "grow":
                f.seek(0, 2)
                f.write(b"appended after the size check")
            else:
                f.truncate(size - 1)

    with pytest.raises(IntegrityError, match=rf"the bundle .* {said} while it was read: expected {size} bytes"):
        digest_signed_file(bundle, check=meanwhile, prehash=prehash)
