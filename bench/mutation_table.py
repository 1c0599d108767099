"""The entries of the mutation table (``python -m bench.mutations``): one security check each.

``find`` is the exact source text that enforces the check (it must occur once in ``file``);
``replace`` neutralises it; ``tests`` are the pytest arguments that cover the module, kept small so
each entry runs in seconds. ``equivalent`` marks a mutation that does not change behaviour, with why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    check: str
    file: str
    find: str
    replace: str
    tests: str
    equivalent: str = ""


def off(check: str, file: str, condition: str, tests: str, after: str = "") -> Mutation:
    """The check ``if CONDITION:`` never fires (``after``: the text that follows, where the condition alone
    occurs more than once)."""
    return Mutation(check, file, f"if {condition}:{after}", f"if False:{after}", tests)


_SIGNED_TIP = (
    "\n        raise IntegrityError(\n            f\"the bundle's manifest has sha256 {digest};"
    ' the signatures sign {statement.manifest_sha256}.",\n'
    '            tip="The manifest is not the signed one: do not '
)
BUNDLE = "tests/bundle/test_hostile_bundles.py"
TRUST = "tests/trust/test_trust.py tests/trust/test_trust_votes.py tests/trust/test_trust_reads.py"
PAX = "tests/bundle/test_pax_records.py tests/bundle/test_hostile_bundles.py"
SIGNING = (
    "tests/minisign/test_signing.py -k 'not minisign_ and not process and not self_test and not doctor"
    " and not lockbuild_sign and not appended and not build_reads'"
)
STORE = "tests/site/test_site_store.py tests/trust/test_trust_port.py"
INSTALL_ROOT = "tests/install/test_install.py -k 'root or symlink or lock_file or staging or copied'"
PARTS = "tests/site/test_site_parts.py tests/trust/test_trust_port.py -k 'part or parts'"
PART_LIST = "tests/site/test_part_list_rules.py"
OCI = "tests/registry/test_site_oci.py tests/registry/test_registry_transport.py"
FETCH = "tests/fetch/test_fetch.py -k 'not two_gigabyte and not progress and not command'"
DNS = "tests/selftest/test_selftest_tracer.py -k 'dns_reader or captured'"
IMAGE = (
    "tests/image/test_image.py"
    " -k 'untrusted_image or edited_record or sites_dates or flipped_byte or signed_image_verifies'"
)
TERMINAL = "tests/builder/test_builder_process.py -k 'escape' tests/choice/test_choose.py -k 'planted or escape'"
SELFTEST_PURE = (
    "tests/selftest/test_selftest.py -k 'strace_lines or query_names or verdicts_local or bad_env or env_round'"
)

ENTRIES: list[Mutation] = [
    # --- site/sources.py: DeltaFile -----------------------------------------------------------------
    off(
        "a delta's head and manifest are bounded before they are read",
        "lockbuild/site/sources.py",
        "h.size > limit",
        "tests/site/test_delta_bounds.py",
    ),
    off(
        "a delta's manifest is bounded before it is read (bundle.toml)",
        "lockbuild/site/sources.py",
        "h.size > limit",
        "tests/site/test_delta_bounds.py -k manifest",
    ),
    # --- site/storemodel.py, site/storeread.py: kept signatures --------------------------------------
    Mutation(
        "kept signatures: at most MAX_SIGNATURES blocks",
        "lockbuild/site/storemodel.py",
        "len(out) == MAX_SIGNATURES or ",
        "",
        "tests/site/test_kept_signatures.py",
    ),
    Mutation(
        "kept signatures: at most max_signature_file bytes",
        "lockbuild/site/storemodel.py",
        " or size + len(text.encode()) > limits.max_signature_file",
        "",
        "tests/site/test_kept_signatures.py",
    ),
    Mutation(
        "the store's kept blocks are bounded on read",
        "lockbuild/site/storeread.py",
        "SIGNATURE_FILE, self.limits.max_signature_file,",
        "SIGNATURE_FILE, 1 << 40,",
        "tests/site/test_kept_signatures.py -k read",
    ),
    # --- registry/artifact.py: pull -------------------------------------------------------------------
    Mutation(
        "a pulled blob is read no further than its signed size (digest.pump's bound, both its guards)",
        "lockbuild/digest.py",
        "if want <= 0:\n            break\n        chunk = read(want)\n        if not chunk:\n            break\n"
        "        total += len(chunk)\n        if limit is not None and total > limit:\n            break",
        "chunk = read(max(want, 1))\n        if not chunk:\n            break\n        total += len(chunk)",
        "tests/registry/test_pull_bounds.py",
    ),
    Mutation(
        "a pulled blob longer than signed is refused",
        "lockbuild/registry/artifact.py",
        "    if have > m.size:\n        remove_at(",
        "    if False:\n        remove_at(",
        "tests/registry/test_pull_bounds.py",
    ),
    # --- bundle/bootstrap.sh ----------------------------------------------------------------------
    Mutation(
        "the bootstrap installs the lock with --require-hashes",
        "lockbuild/bundle/bootstrap.sh",
        "--no-index --require-hashes --no-build",
        "--no-index --no-build",
        "tests/builder/test_bootstrap_hashes.py -k refuses",
    ),
    # --- trust/policy.py ----------------------------------------------------------------------------
    off(
        "a statement for another file name does not count",
        "lockbuild/trust/policy.py",
        "name is not None and st.file != name",
        TRUST,
    ),
    off(
        "an expired statement does not count",
        "lockbuild/trust/policy.py",
        "st.expires is not None and now >= st.expires",
        TRUST,
    ),
    off(
        "a statement from after the node's clock does not count",
        "lockbuild/trust/policy.py",
        "now + CLOCK_SKEW < st.as_of",
        TRUST,
    ),
    off("a key not in the trust store does not count", "lockbuild/trust/policy.py", "key is None", TRUST),
    off("a revoked key does not count", "lockbuild/trust/policy.py", "store.is_revoked(key)", TRUST),
    off("legacy Ed blocks do not count", "lockbuild/trust/policy.py", "sig.algorithm != SIG_ALG_HASHED", TRUST),
    off(
        "a trusted key's statement about this file with other digests is a hard failure",
        "lockbuild/trust/policy.py",
        "mismatch is not None",
        TRUST,
    ),
    Mutation("one vote per key", "lockbuild/trust/policy.py", "if v.signer.raw in seen:", "if False:", TRUST),
    off(
        "two trusted groups with different statements are refused",
        "lockbuild/trust/policy.py",
        "len(ranked) > 1 and len(ranked[1]) >= needed",
        TRUST,
    ),
    off(
        "a file larger than every signed size is refused before it is read",
        "lockbuild/trust/policy.py",
        "signed and size > max(signed)",
        "tests/site/test_site_parts.py tests/trust/test_trust_port.py tests/trust/test_trust.py",
    ),
    Mutation(
        "a file shorter than every signed size is reported as incomplete",
        "lockbuild/trust/policy.py",
        "if size in signed or not bigger:",
        "if True:",
        TRUST,
    ),
    off(
        "the site's not-before is applied",
        "lockbuild/trust/policy.py",
        "policy.not_before is not None and when < policy.not_before",
        TRUST,
    ),
    off(
        "the site's not-after is applied",
        "lockbuild/trust/policy.py",
        "policy.not_after is not None and when > policy.not_after",
        TRUST,
    ),
    off(
        "a manifest from a store, delta or registry is the signed one (signed_manifest)",
        "lockbuild/trust/policy.py",
        "digest != statement.manifest_sha256",
        "tests/trust/test_trust.py tests/site/test_site_delta.py -k 'swapped or block_alone'",
        after=_SIGNED_TIP + "use it",
    ),
    off("the manifest's fields say what the statement says", "lockbuild/trust/policy.py", "signed != value", TRUST),
    # --- trust/opener.py ----------------------------------------------------------------------------
    Mutation(
        "a trust directory another user can write is refused",
        "lockbuild/trust/opener.py",
        "    problem = owner_problem(st)\n    if problem:",
        "    problem = owner_problem(st)\n    if False:",
        "tests/trust/test_redteam.py -k trust_directory",
    ),
    off(
        "a signed manifest of another build than the one named is refused",
        "lockbuild/trust/opener.py",
        "asked is not None and got != asked",
        "tests/trust/test_trust_port.py -k another_signed_build",
    ),
    off(
        "a bundle that grows while hashed is refused",
        "lockbuild/digest.py",
        "f.read(1)",
        "tests/trust/test_trust_votes.py",
    ),
    off(
        "a bundle that shrinks while hashed is refused",
        "lockbuild/digest.py",
        "not n",
        "tests/trust/test_trust_votes.py tests/trust/test_trust.py",
        after='\n                raise IntegrityError(f"{what} shrank while',
    ),
    off(
        "the manifest read again must be the signed one",
        "lockbuild/trust/opener.py",
        "again is not None and again != self.manifest_bytes",
        "tests/trust/test_trust_reads.py",
    ),
    Mutation(
        "the bundle is opened bounded by max_bundle",
        "lockbuild/trust/source.py",
        "what=what, max_size=limits.max_bundle,",
        "what=what, max_size=1 << 60,",
        "tests/trust/test_trust_reads.py",
    ),
    Mutation(
        "the signature file is read bounded (read_signatures)",
        "lockbuild/trust/source.py",
        'raw = read_regular(path, what="signature file", max_size=limits.max_signature_file, error=',
        'raw = read_regular(path, what="signature file", max_size=1 << 40, error=',
        "tests/trust/test_trust_reads.py",
    ),
    Mutation(
        "a bundle's .minisig is read bounded (BundleFile)",
        "lockbuild/trust/source.py",
        'self.signatures, what="signature file", max_size=limits.max_signature_file, error=SignatureError',
        'self.signatures, what="signature file", max_size=1 << 40, error=SignatureError',
        "tests/trust/test_trust_reads.py",
    ),
    # --- bundle/extract.py --------------------------------------------------------------------------
    off(
        "a member of another name than listed next is refused",
        "lockbuild/bundle/extract.py",
        "piece.name != member.path",
        BUNDLE,
    ),
    off(
        "a member whose header size is not the listed size is refused",
        "lockbuild/bundle/extract.py",
        "piece.size != member.size",
        BUNDLE,
    ),
    off(
        "an archive that ends before the listed members is refused",
        "lockbuild/bundle/extract.py",
        "piece is None",
        BUNDLE,
    ),
    off(
        "an unlisted member after the last listed one is refused",
        "lockbuild/bundle/extract.py",
        "extra is not None",
        BUNDLE,
    ),
    off(
        "a member's bytes are exactly its signed size",
        "lockbuild/bundle/extract.py",
        "n != member.size",
        BUNDLE + " tests/site/test_store_link.py -k longer",
    ),
    off(
        "a member's bytes have exactly its signed sha256",
        "lockbuild/bundle/extract.py",
        "digest != member.sha256",
        BUNDLE,
    ),
    off(
        "members a store lacks are refused unless allowed",
        "lockbuild/bundle/extract.py",
        "absent and not allow_absent",
        "tests/site/test_site_delta.py -k without_its_base",
    ),
    Mutation(
        "an existing file at a member's path is never overwritten",
        "lockbuild/bundle/extract.py",
        "    except FileExistsError:\n        raise _bad(",
        "    except FileNotFoundError:\n        raise _bad(",
        BUNDLE,
    ),
    # --- bundle/tar.py ------------------------------------------------------------------------------
    off(
        "a malformed numeric tar field is refused",
        "lockbuild/bundle/tar.py",
        'not text.isdigit() or b"8" in text or b"9" in text',
        PAX,
    ),
    off(
        "a tar header with a bad checksum is refused",
        "lockbuild/bundle/tar.py",
        "stored != sum(block[:148]) + 8 * 0x20 + sum(block[156:])",
        PAX,
    ),
    off("a tar header that is not ustar is refused", "lockbuild/bundle/tar.py", "block[257:265] != _MAGIC_USTAR", PAX),
    off(
        "a pax record of a malformed length is refused",
        "lockbuild/bundle/tar.py",
        'not length_text.isdigit() or (length_text.startswith(b"0"))',
        PAX,
    ),
    off(
        "a pax record that overruns its header is refused",
        "lockbuild/bundle/tar.py",
        "end > len(data) or end <= space + 1 or data[end - 1] != 0x0A",
        PAX,
    ),
    off("a repeated pax record is refused", "lockbuild/bundle/tar.py", "not eq or key in records", PAX),
    off(
        "pax records other than path and size are refused",
        "lockbuild/bundle/tar.py",
        "key not in _PAX_USED + _PAX_IGNORED",
        BUNDLE,
    ),
    off(
        "a pax size that is not a number is refused",
        "lockbuild/bundle/tar.py",
        "size is not None and not (size.isascii() and size.isdigit())",
        PAX,
    ),
    off("a truncated tar stream is refused", "lockbuild/bundle/tar.py", "len(data) != n", BUNDLE),
    off("a pax header over MAX_PAX is refused", "lockbuild/bundle/tar.py", "header.size > MAX_PAX", PAX),
    off("two pax headers in a row are refused", "lockbuild/bundle/tar.py", 'header.type == b"x"', BUNDLE),
    off(
        "padding that holds data is refused",
        "lockbuild/bundle/tar.py",
        'pad and any(self._exact(pad, f"the padding after {what}"))',
        BUNDLE,
    ),
    off(
        "a lone zero block is refused",
        "lockbuild/bundle/tar.py",
        'self._exact(BLOCK, "the end-of-archive marker") != _ZERO',
        BUNDLE,
    ),
    off(
        "data after the end of the archive is refused", "lockbuild/bundle/tar.py", "data.count(0) != len(data)", BUNDLE
    ),
    off("padding after the archive is bounded", "lockbuild/bundle/tar.py", "rest > MAX_TRAILER", BUNDLE),
    off(
        "links, devices and other non-regular members are refused",
        "lockbuild/bundle/tar.py",
        "h.type not in _REGULAR",
        BUNDLE,
    ),
    off("setuid, setgid and sticky bits are refused", "lockbuild/bundle/tar.py", "h.mode & 0o7000", BUNDLE),
    off("a member over max_member is refused", "lockbuild/bundle/tar.py", "h.size > limits.max_member", BUNDLE),
    off(
        "a member cut short is refused",
        "lockbuild/bundle/tar.py",
        "pump(tar.f.take, *sinks, limit=h.size, peek=False, advance=progress.advance) < h.size",
        "tests/bundle/test_tar_truncation.py",
    ),
    # --- bundle/zstdframe.py ------------------------------------------------------------------------
    off("a zstd header cut short is refused", "lockbuild/bundle/zstdframe.py", "len(data) != n", BUNDLE),
    off("a file that is not a zstd frame is refused", "lockbuild/bundle/zstdframe.py", "magic != _MAGIC", BUNDLE),
    off("a reserved zstd header bit is refused", "lockbuild/bundle/zstdframe.py", "reserved", BUNDLE),
    off("a zstd frame that needs a dictionary is refused", "lockbuild/bundle/zstdframe.py", "did", BUNDLE),
    off(
        "a zstd content size over max_bundle is refused",
        "lockbuild/bundle/zstdframe.py",
        "fcs > limits.max_bundle",
        BUNDLE,
    ),
    off(
        "a zstd window over the limit is refused",
        "lockbuild/bundle/zstdframe.py",
        "window > limits.zstd_window",
        BUNDLE,
    ),
    off(
        "a compressed zstd frame without a checksum is refused",
        "lockbuild/bundle/zstdframe.py",
        "not frame.checksum and kind != 0",
        BUNDLE,
    ),
    off(
        "a zstd block over the stored block size is refused",
        "lockbuild/bundle/zstdframe.py",
        "size > STORED_BLOCK",
        "tests/bundle/test_zstd_frames.py",
    ),
    off(
        "the count of zstd frames is bounded",
        "lockbuild/bundle/zstdframe.py",
        "frames > MAX_FRAMES",
        "tests/bundle/test_zstd_frames.py",
    ),
    off("a reserved zstd block type is refused", "lockbuild/bundle/zstdframe.py", "kind == 3", BUNDLE),
    off(
        "a zstd block that runs past the file is refused",
        "lockbuild/bundle/zstdframe.py",
        "f.tell() + skip > end",
        BUNDLE,
    ),
    off(
        "bytes after the zstd frame are refused",
        "lockbuild/bundle/zstdframe.py",
        'end - here < 4 or struct.unpack("<I", f.read(4))[0] != _MAGIC',
        BUNDLE,
    ),
    off(
        "decompressed bytes are bounded by max_bundle",
        "lockbuild/bundle/zstdframe.py",
        "self.total > self.limit",
        "tests/bundle/test_unpack_bounds.py",
    ),
    # --- bundle/paths.py ----------------------------------------------------------------------------
    off(
        "an empty or over-long member path is refused",
        "lockbuild/bundle/paths.py",
        'not path or len(path.encode("utf-8", "surrogatepass")) > limits.max_path',
        BUNDLE,
    ),
    off(
        "an absolute path, a backslash or NUL is refused",
        "lockbuild/bundle/paths.py",
        'path.startswith("/") or "\\\\" in path or "\\0" in path',
        BUNDLE,
    ),
    off(
        "'', '.' and '..' parts are refused",
        "lockbuild/bundle/paths.py",
        'any(part in ("", ".", "..") for part in path.split("/"))',
        BUNDLE,
    ),
    off(
        "control characters in a path are refused",
        "lockbuild/bundle/paths.py",
        'any(unicodedata.category(c).startswith("C") for c in path)',
        BUNDLE,
    ),
    off(
        "a path that is not NFC is refused",
        "lockbuild/bundle/paths.py",
        'path != unicodedata.normalize("NFC", path)',
        BUNDLE,
    ),
    off(
        "a file under another file's name is refused",
        "lockbuild/bundle/paths.py",
        'kinds.setdefault(str(parent), "dir") == "file"',
        BUNDLE,
    ),
    off(
        "paths that collide are refused",
        "lockbuild/bundle/paths.py",
        'old is not None and (old == "file" or kind == "file")',
        BUNDLE,
    ),
    # --- bundle/manifestparse.py --------------------------------------------------------------------
    off(
        "a member size outside 0..max_member is refused",
        "lockbuild/bundle/manifestparse.py",
        "not 0 <= size <= limits.max_member",
        BUNDLE,
    ),
    off(
        "a member sha256 that is not one is refused", "lockbuild/bundle/manifestparse.py", "not is_sha256(sha)", BUNDLE
    ),
    off("an unknown member kind is refused", "lockbuild/bundle/manifestparse.py", "kind not in KINDS", BUNDLE),
    off(
        "an origin with credentials is refused",
        "lockbuild/bundle/manifestparse.py",
        '"@" in parts.netloc',
        "tests/trust/test_redteam.py -k origin",
    ),
    off(
        "a manifest over max_manifest is refused",
        "lockbuild/bundle/manifestparse.py",
        "len(raw) > limits.max_manifest",
        "tests/bundle/test_unpack_bounds.py",
    ),
    off("unknown manifest keys are refused", "lockbuild/bundle/manifestparse.py", "unknown", BUNDLE),
    off(
        "more members than max_members are refused",
        "lockbuild/bundle/manifestparse.py",
        "len(files) > limits.max_members",
        BUNDLE,
    ),
    off(
        "a manifest whose members add up past max_bundle is refused",
        "lockbuild/bundle/manifestparse.py",
        "total > limits.max_bundle",
        "tests/bundle/test_unpack_bounds.py",
    ),
    off(
        "an unknown lock format is refused",
        "lockbuild/bundle/manifestparse.py",
        "lock_format not in (LOCK_FORMATS if fmt != MODEL_FORMAT else (NO_LOCK,))",
        BUNDLE,
    ),
    off(
        "a repeated member path is refused by the manifest", "lockbuild/bundle/manifestparse.py", "key in seen", BUNDLE
    ),
    # --- minisign/* ---------------------------------------------------------------------------------
    off(
        "base64 of the wrong length is refused", "lockbuild/minisign/encoding.py", "len(data) != expected_len", SIGNING
    ),
    off("non-canonical base64 is refused", "lockbuild/minisign/encoding.py", "b64encode(data) != text", SIGNING),
    off("a signature file over max_bytes is refused", "lockbuild/minisign/sigfile.py", "size > max_bytes", SIGNING),
    off("CR and NUL inside a signature line are refused", "lockbuild/minisign/sigfile.py", "char in line", SIGNING),
    off("a signature file of a partial block is refused", "lockbuild/minisign/sigfile.py", "len(lines) % 4", SIGNING),
    off(
        "more than max_signatures blocks are refused",
        "lockbuild/minisign/sigfile.py",
        "count > max_signatures",
        SIGNING,
    ),
    off(
        "a block without its untrusted comment line is refused",
        "lockbuild/minisign/sigfile.py",
        "not block[0].startswith(UNTRUSTED_PREFIX)",
        SIGNING,
    ),
    off(
        "a block without its trusted comment line is refused",
        "lockbuild/minisign/sigfile.py",
        "not block[2].startswith(TRUSTED_PREFIX)",
        SIGNING,
    ),
    off(
        "an unknown signature algorithm is refused",
        "lockbuild/minisign/sigfile.py",
        "algorithm not in (SIG_ALG_HASHED, SIG_ALG)",
        SIGNING,
    ),
    off(
        "a signature by another key id is refused", "lockbuild/minisign/sigfile.py", "sig.key_id != key.key_id", SIGNING
    ),
    off(
        "absurd scrypt parameters are refused",
        "lockbuild/minisign/keys.py",
        "p < 1 or memory > MAX_SCRYPT_MEMORY or work > MAX_SCRYPT_WORK",
        SIGNING,
    ),
    off(
        "a secret key with a bad checksum is refused",
        "lockbuild/minisign/keys.py",
        "not zeroed_ok and not hmac.compare_digest(checksum, _checksum(key_id, secret64))",
        SIGNING,
    ),
    off(
        "a secret key readable by others is refused",
        "lockbuild/minisign/keyfiles.py",
        "mode & 0o077 and not allow_readable",
        "tests/minisign/test_signing.py -k readable",
    ),
    # --- fsio/ ----------------------------------------------------------------------------------------
    off(
        "a file from outside must be a regular file",
        "lockbuild/fsio/opening.py",
        "not stat.S_ISREG(st.st_mode)",
        "tests/trust/test_trust.py -k bounded tests/trust/test_redteam.py -k regular",
        after='\n            raise error(f"the {what} {where} is {kind_of',
    ),
    off(
        "a file from outside is bounded before it is read",
        "lockbuild/fsio/opening.py",
        "st.st_size > max_size",
        "tests/trust/test_trust.py -k bounded",
    ),
    off(
        "a bounded read refuses more than its limit",
        "lockbuild/fsio/opening.py",
        "len(data) > limit",
        "tests/fsio/test_fsio_bounds.py",
    ),
    off(
        "a trust directory or store owned by another user is refused",
        "lockbuild/fsio/owners.py",
        "st.st_uid not in owners",
        "tests/trust/test_redteam.py -k trust_directory",
    ),
    off(
        "a trust directory or store writable by group or others is refused",
        "lockbuild/fsio/owners.py",
        "st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)",
        "tests/trust/test_redteam.py -k trust_directory " + STORE,
    ),
    off(
        "an ancestor that is a link is judged by what it points to",
        "lockbuild/fsio/owners.py",
        "stat.S_ISLNK(st.st_mode)",
        "tests/trust/test_redteam.py -k root_below",
    ),
    off(
        "an ancestor owned by another user is refused",
        "lockbuild/fsio/owners.py",
        "st.st_uid not in (0, os.geteuid())",
        "tests/trust/test_redteam.py -k root_below",
    ),
    off(
        "an ancestor others can write (not sticky) is refused",
        "lockbuild/fsio/owners.py",
        "st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX",
        "tests/trust/test_redteam.py -k root_below",
    ),
    off(
        "a deeply nested JSON answer is refused",
        "lockbuild/documents.py",
        "depth > max_depth",
        "tests/fsio/test_fsio_bounds.py",
    ),
    Mutation(
        "new files are created O_EXCL (never through what exists)",
        "lockbuild/fsio/opening.py",
        "NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC",
        "NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC",
        BUNDLE + " tests/site/test_site_parts.py",
    ),
    Mutation(
        "files from outside are opened O_NOFOLLOW",
        "lockbuild/fsio/opening.py",
        "FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC",
        "FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC",
        "tests/trust/test_trust.py -k bounded tests/trust/test_redteam.py -k regular",
    ),
    # --- install/places.py, install/stage.py, install/swap.py ------------------------------------
    off("a root that is a link is refused", "lockbuild/install/places.py", "stat.S_ISLNK(st.st_mode)", INSTALL_ROOT),
    off(
        "a root owned by another user is refused",
        "lockbuild/install/places.py",
        "st.st_uid != os.geteuid()",
        INSTALL_ROOT,
    ),
    off(
        "a root writable by group or others is refused",
        "lockbuild/install/places.py",
        "st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)",
        INSTALL_ROOT,
    ),
    Mutation(
        "uv installs offline, from the bundle only, every file by its hash",
        "lockbuild/install/stage.py",
        '"--require-hashes"',
        '"--no-build-isolation"',
        "tests/install/test_install.py -k without_hashes",
    ),
    off(
        "the lock file is a plain file of this user with one link",
        "lockbuild/install/swap.py",
        "not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1",
        "tests/install/test_install.py -k lock_file",
    ),
    # --- site/partlist.py ------------------------------------------------------------------------------
    off(
        "a part list naming more than MAX_PARTS parts is refused",
        "lockbuild/site/partlist.py",
        "not 0 < len(parts) <= MAX_PARTS",
        PART_LIST,
    ),
    off(
        "a part's name is a plain name",
        "lockbuild/site/partlist.py",
        'not isinstance(name, str) or not _PART_NAME.fullmatch(name) or ".." in name',
        PARTS,
    ),
    off(
        "a part's size is a non-negative int",
        "lockbuild/site/partlist.py",
        "not isinstance(psize, int) or isinstance(psize, bool) or psize < 0",
        PART_LIST,
    ),
    off(
        "the parts add up to the listed size",
        "lockbuild/site/partlist.py",
        "sum(p.size for p in out) != size",
        PART_LIST,
    ),
    off(
        "a part that shrinks while it is read is refused naming it", "lockbuild/site/partlist.py", "n != p.size", PARTS
    ),
    off("a part's sha256 is checked", "lockbuild/site/partlist.py", "digest != p.sha256", PARTS),
    off(
        "the joined parts have the listed sha256",
        "lockbuild/site/partlist.py",
        "whole.hexdigest() != listing.sha256",
        PARTS,
    ),
    # --- registry/api.py --------------------------------------------------------------------------------
    off("credentials in an oci:// reference are refused", "lockbuild/registry/reference.py", '"@" in host', OCI),
    off(
        "a realm over a weaker scheme gets no credentials",
        "lockbuild/registry/auth.py",
        "_RANK[parts.scheme] < _RANK.get(registry_scheme, 1)",
        OCI,
    ),
    off(
        "plain http only to loopback unless allowed",
        "lockbuild/registry/client.py",
        'parts.scheme != "http" or not (self.plain_http or is_loopback(parts.hostname or ""))',
        "tests/registry/test_registry_scheme.py",
    ),
    off(
        "an answer announced over its cap is refused before it is read",
        "lockbuild/registry/client.py",
        "not truncate and length.isdigit() and int(length) > limit",
        OCI + " -k token",
    ),
    off(
        "an answer is read no further than its cap",
        "lockbuild/registry/client.py",
        "len(out) > limit",
        OCI,
        after="\n                if truncate:",
    ),
    off(
        "a range answer that starts elsewhere is refused",
        "lockbuild/registry/api.py",
        'not r.headers.get("Content-Range", "").startswith(f"bytes {offset}-")',
        OCI + " -k range",
    ),
    off(
        "a deadline that has run out stops the transfer",
        "lockbuild/registry/connection.py",
        "left <= 0",
        OCI + " -k 'time or deadline'",
    ),
    # --- fetch/http.py, fetch/fetcher.py, urls.py -------------------------------------------------
    off(
        "a redirect to another host or scheme is refused",
        "lockbuild/fetch/http.py",
        "urlsplit(target)[:2] != urlsplit(current)[:2]",
        "tests/fetch/test_http.py",
    ),
    off(
        "a body announced over its limit is refused before it is read",
        "lockbuild/fetch/http.py",
        "announced.isdigit() and int(announced) > limit",
        "tests/fetch/test_http.py",
    ),
    off(
        "a body is read no further than its limit",
        "lockbuild/fetch/http.py",
        "len(body) > limit",
        "tests/fetch/test_http.py -k 'finite_body or small_limit'",
    ),
    off(
        "a download announced larger than the lock says is refused unread",
        "lockbuild/fetch/sink.py",
        "announced is not None and announced.isdigit() and self.written + int(announced) > self.limit",
        FETCH,
    ),
    off(
        "a download is read no further than the lock's size",
        "lockbuild/fetch/sink.py",
        "self.written + len(chunk) > self.limit",
        FETCH,
    ),
    off(
        "a resumed download's range must start where asked",
        "lockbuild/fetch/fetcher.py",
        'not headers.get("content-range", "").startswith(f"bytes {offset}-")',
        FETCH,
    ),
    off(
        "a download shorter than the lock says is refused",
        "lockbuild/fetch/fetcher.py",
        "w.size is not None and sink.written != w.size",
        FETCH,
    ),
    off("a download with another sha256 is refused", "lockbuild/fetch/fetcher.py", "got != digest_of(w.sha256)", FETCH),
    off(
        "a scheme other than https and http is refused as not https",
        "lockbuild/wire/urls.py",
        'scheme != "http"',
        "tests/wire/test_url_rules.py",
    ),
    Mutation(
        "a look-alike of localhost is not loopback",
        "lockbuild/wire/urls.py",
        'if scheme == "https" or (scheme == "http" and (is_loopback(host) or allow_insecure)):',
        'if scheme in ("https", "http"):',
        "tests/trust/test_redteam.py -k plain_http",
    ),
    off(
        "user:token@ in a URL is named a credential",
        "lockbuild/wire/urls.py",
        '"@" in parts.netloc',
        "tests/wire/test_url_rules.py",
    ),
    # --- recipe/checks.py ---------------------------------------------------------------------------
    off(
        "a recipe URL that carries a credential is refused",
        "lockbuild/recipe/checks.py",
        "secret is not None",
        "tests/recipe/test_recipe_rules.py",
    ),
    off(
        "a control character in a requirement is refused (one requirement on one line)",
        "lockbuild/recipe/checks.py",
        'any(ord(c) < 32 and c != "\\t" for c in value)',
        "tests/recipe/test_recipe.py -k reach_outside",
    ),
    off(
        "a control character in a recipe command is refused",
        "lockbuild/recipe/parse.py",
        "why is not None",
        "tests/recipe/test_recipe_rules.py -k control",
        after='\n            t.p.add(t.key(key), f"word {i}: {why}',
    ),
    off(
        "a URL requirement is refused",
        "lockbuild/recipe/checks.py",
        '"://" in value or value.strip().lower().startswith(("git+", "hg+", "svn+", "bzr+"))',
        "tests/recipe/test_recipe_rules.py tests/recipe/test_recipe.py",
    ),
    off(
        "a tag with '..' or '//' is refused",
        "lockbuild/recipe/checks.py",
        'not _TAG_CHARS.fullmatch(value) or ".." in value or "//" in value',
        "tests/recipe/test_recipe.py",
    ),
    # --- proc/sandbox.py ---------------------------------------------------------------------------------
    Mutation(
        "the sandbox has no network unless asked",
        "lockbuild/proc/sandbox.py",
        '    if spec.network:\n        out.append("--share-net")',
        '    if True:\n        out.append("--share-net")',
        "tests/proc/test_sandbox.py -k network",
    ),
    Mutation(
        "the sandbox drops every capability",
        "lockbuild/proc/sandbox.py",
        '"--cap-drop", "ALL", ',
        "",
        "tests/proc/test_sandbox.py -k capabilities",
    ),
    Mutation(
        "the sandbox's root is read-only",
        "lockbuild/proc/sandbox.py",
        'out += ["--remount-ro", "/"]',
        "out += []",
        "tests/proc/test_sandbox.py -k read_only",
    ),
    Mutation(
        "the sandbox starts with an empty environment",
        "lockbuild/proc/sandbox.py",
        'out.append("--clearenv")',
        "pass",
        "tests/proc/test_sandbox.py -k environment",
        equivalent="bwrap itself is started with env={'PATH': BWRAP_PATH} and the Spec's --setenv PATH "
        "replaces that one variable, so the environment inside is the Spec's either way (defence in depth)",
    ),
    Mutation(
        "the sandbox dies with its parent",
        "lockbuild/proc/sandbox.py",
        '"--die-with-parent", ',
        "",
        "tests/proc/test_sandbox.py -k 'daemon or timeout'",
    ),
    off(
        "a sandbox environment name with '=' or NUL is refused",
        "lockbuild/proc/sandbox.py",
        'not k or "=" in k or "\\0" in k or "\\0" in v',
        "tests/proc/test_sandbox.py -k bad_specs",
    ),
    # --- selftest/ ----------------------------------------------------------------------------------
    Mutation(
        "only loopback addresses count as local in the self-test",
        "lockbuild/selftest/tracelog.py",
        'if host.lower().rstrip(".") in ("localhost", "localhost.localdomain", "ip6-localhost"):',
        "if True:",
        SELFTEST_PURE,
    ),
    off(
        "a name look-up of an allowed name passes, others fail",
        "lockbuild/selftest/report.py",
        "n.host.lower() in traced_names",
        SELFTEST_PURE,
    ),
    # --- trust/opener.py::decide, image/imagefile.py: the one decision, for images too ----------------------
    off(
        "a file no trusted statement names is refused before a byte of it is read",
        "lockbuild/trust/opener.py",
        "not signed_sizes(blocks, store, name=name)",
        IMAGE,
    ),
    Mutation(
        "a file's size is checked against the signed sizes before it is hashed (decide)",
        "lockbuild/trust/opener.py",
        "            check_complete(blocks, store, name=name, size=size)",
        "            pass",
        TRUST,
    ),
    Mutation(
        "the site's dates are applied to every signed thing (decide)",
        "lockbuild/trust/opener.py",
        "    check_dates(statement, store.policy)\n",
        "",
        IMAGE,
    ),
    off(
        "the subject's bytes (a manifest, an image's record) have the signed sha256 (decide)",
        "lockbuild/trust/opener.py",
        "digest != statement.manifest_sha256",
        IMAGE,
    ),
    Mutation(
        "an image is hashed as the signed file, its digests judged (ImageFile)",
        "lockbuild/image/imagefile.py",
        'return digest_signed_file(self.image, limits, check, prehash=False, what="image")',
        "return None  # type: ignore[return-value]",
        IMAGE,
    ),
    # --- choice/choose.py: a folder's files -----------------------------------------------------------
    Mutation(
        "a folder's file that fails the trust decision is skipped, named, and counts for nothing",
        "lockbuild/choice/choose.py",
        'skipped.append(f"{o.file}: not judged: its signatures are refused ({exc.message})")',
        "raise",
        "tests/choice/test_choose.py -k 'folder or skipped or planted'",
    ),
    # --- text.py: what reaches the terminal ----------------------------------------------------------
    Mutation(
        "every line the CLI writes has its non-printable characters escaped (for_terminal)",
        "lockbuild/text.py",
        "return escape(mask_credentials(text))",
        "return mask_credentials(text)",
        TERMINAL,
    ),
    Mutation(
        "every line the CLI writes has the credentials of its URLs masked (for_terminal)",
        "lockbuild/text.py",
        "return escape(mask_credentials(text))",
        "return escape(text)",
        "tests/builder/test_builder_process.py -k escape",
    ),
    # --- sdist/metahook.py, builder/selfwheel.py -------------------------------------------------------
    Mutation(
        "an sdist's metadata hook runs in the sandbox with no network",
        "lockbuild/sdist/metahook.py",
        "            network=False,\n        )",
        "            network=True,\n        )",
        "tests/sdist/test_sdist_metadata.py -k 'only_the_compile or reaches_no_network'",
    ),
    off(
        "the self wheel's blobs are hashed again against their ids",
        "lockbuild/builder/selfwheel.py",
        'not algorithm or hashlib.new(algorithm, b"blob %d\\0" % len(data) + data).hexdigest() != b.oid',
        "tests/builder/test_selfbundle.py -k hash_to_its_id",
    ),
    # --- selftest/seccomp.py, selftest/dns.py ----------------------------------------------------------
    Mutation(
        "the sandbox's filter refuses a seccomp listener of the engine's own",
        "lockbuild/selftest/seccomp.py",
        '_Ins(_JSET, FLAG_NEW_LISTENER, jt="refuse"),',
        '_Ins(_JSET, FLAG_NEW_LISTENER, jt="allow"),',
        "tests/selftest/test_selftest_tracer.py -k filter_refuses_a_listener",
    ),
    Mutation(
        "a DNS query names one question only",
        "lockbuild/selftest/dns.py",
        ' or int.from_bytes(message[4:6], "big") != 1',
        "",
        DNS,
    ),
    off("a DNS name with a compression pointer is no name", "lockbuild/selftest/dns.py", "n > 63", DNS),
    Mutation(
        "a DNS name over 255 bytes is no name",
        "lockbuild/selftest/dns.py",
        "if size > 254 or i + 1 + n > len(message):",
        "if i + 1 + n > len(message):",
        DNS,
    ),
    Mutation(
        "a DNS question without its type and class is no name",
        "lockbuild/selftest/dns.py",
        "if i + 5 <= len(message) else None",
        "if True else None",
        DNS,
    ),
    Mutation(
        "a dot inside a DNS label is escaped (one label never passes for several)",
        "lockbuild/selftest/dns.py",
        'if b != 0x2E else "\\\\."',
        'if b != 0x2E else "."',
        DNS,
    ),
    Mutation(
        "a DNS stream cut short by strace is read no further",
        "lockbuild/selftest/dns.py",
        "if not whole or len(self.pending) > MAX_STREAM:",
        "if len(self.pending) > MAX_STREAM:",
        DNS,
    ),
]
