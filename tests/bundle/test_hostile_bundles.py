"""The hostile-bundle catalogue: one hand-crafted attack per test, each refused with a clear
IntegrityError, and nothing written outside the destination directory.

Every bundle here is tests/hostile.py's valid baseline with one defect; test_baseline_is_accepted
proves the baseline itself reads, so each refusal is the defect's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from hostile import (
    BLOCK,
    GOOD_FILES,
    RECIPE,
    RECORD,
    TarEntry,
    ZipEntry,
    add_dictionary_id,
    bundle_tar,
    compress,
    frame,
    frame_header_len,
    good_bundle,
    good_entries,
    good_members,
    header,
    manifest,
    member,
    raw_blocks,
    set_window,
    sha,
    tar_archive,
    tar_bytes,
    tree,
    write,
    zero_run_blocks,
    zip_archive,
)

from lockbuild.bundle.manifest import MANIFEST
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.read import MAX_TRAILER, check_zstd_frame, read_head, read_head_raw
from lockbuild.errors import InstallError, IntegrityError, LockbuildError
from lockbuild.install import archives
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.minisign import read_secret_key, write_keypair
from lockbuild.trust import Statement, digest_signed_file, load_trust_store, open_bundle, sign_statement, signature_path
from lockbuild.trust.sign import read_unverified

NAME = "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
GOOD_PATHS = {p for p, _, _ in GOOD_FILES}


def refused(tmp_path: Path, data: bytes, match: str, *, limits: Limits = DEFAULT_LIMITS) -> IntegrityError:
    """Read ``data`` as a bundle into tmp/work/dest: it must raise IntegrityError matching ``match``,
    with a tip, and leave nothing anywhere but inside dest (where only listed regular files may be)."""
    bundle = write(tmp_path / NAME, data)
    work = tmp_path / "work"
    dest = work / "dest"
    dest.mkdir(parents=True)
    with pytest.raises(IntegrityError, match=match) as info:
        read_unverified(bundle, dest=dest, limits=limits)
    assert info.value.tip, "a refusal says what to do"
    assert [p.name for p in work.iterdir()] == ["dest"], "nothing beside the destination"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([NAME, "work"])
    for p in dest.rglob("*"):
        assert not p.is_symlink()
        assert p.is_dir() or (p.is_file() and p.relative_to(dest).as_posix() in GOOD_PATHS), p
    return info.value


def with_entry(index: int, entry: TarEntry) -> list[TarEntry]:
    """The good members with the one at ``index`` replaced."""
    entries = good_entries()
    entries[index] = entry
    return entries


# --- the baseline -------------------------------------------------------------------------------


def test_baseline_is_accepted(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    got = read_unverified(bundle, dest=tmp_path / "dest")
    assert [m.path for m in got.members] == [p for p, _, _ in GOOD_FILES]
    assert sorted(p for p in tree(tmp_path / "dest") if (tmp_path / "dest" / p).is_file()) == sorted(GOOD_PATHS)
    assert (tmp_path / "dest" / "recipe.toml").read_bytes() == RECIPE
    head, recipe = read_head(bundle)
    assert head == got and recipe == RECIPE


# --- paths ----------------------------------------------------------------------------------------

BAD_PATHS = [
    ("../x", "'..' path component"),
    ("assets/../../x", "'..' path component"),
    ("/etc/cron.d/x", "absolute path"),
    ("assets//x", "empty, '.' or '..'"),
    ("./assets/x", "empty, '.' or '..'"),
    ("assets\\..\\x", "backslash"),
    ("assets/x\n", "control character"),
    ("assets/" + "x" * 300, "longer than 255 bytes"),
]


@pytest.mark.parametrize(("path", "why"), BAD_PATHS, ids=[p[:20] for p, _ in BAD_PATHS])
def test_bad_path_in_the_manifest(tmp_path: Path, path: str, why: str) -> None:
    """The manifest and the tar agree on a hostile path: the manifest check refuses it."""
    data = b"payload"
    listed = manifest([*good_members(), member(path, data)])
    tar = bundle_tar([*good_entries(), TarEntry(path, data)], listed=listed)
    refused(tmp_path, compress(tar), re.escape(why))


@pytest.mark.parametrize(("path", "why"), BAD_PATHS, ids=[p[:20] for p, _ in BAD_PATHS])
def test_bad_path_in_a_tar_header(tmp_path: Path, path: str, why: str) -> None:
    """Only the tar header carries the hostile path (the manifest is clean): the header check refuses it."""
    _, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry(path, data)))
    refused(tmp_path, compress(tar), re.escape(why))


def test_absolute_path_is_refused_not_stripped(tmp_path: Path) -> None:
    """tarfile's 'data' filter would quietly strip the '/'; the reader refuses instead."""
    _, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry("/assets/model.bin", data)))
    refused(tmp_path, compress(tar), "refused member path '/assets/model.bin': an absolute path")


def test_non_nfc_path_in_the_manifest(tmp_path: Path) -> None:
    nfd = "assets/cafe\u0301.bin"
    listed = manifest([*good_members(), member(nfd, b"x")])
    tar = bundle_tar([*good_entries(), TarEntry(nfd, b"x")], listed=listed)
    refused(tmp_path, compress(tar), "not in Unicode NFC form")


def test_non_nfc_path_in_a_tar_header(tmp_path: Path) -> None:
    """The manifest lists the NFC name, the tar holds the NFD spelling of it (same on macOS disks)."""
    nfc, nfd = "assets/caf\u00e9.bin", "assets/cafe\u0301.bin"
    listed = manifest([*good_members(), member(nfc, b"x")])
    tar = bundle_tar([*good_entries(), TarEntry(nfd, b"x")], listed=listed)
    refused(tmp_path, compress(tar), "not in Unicode NFC form")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("wheels/Torch.whl", "wheels/torch.whl"),  # case: one file on a case-insensitive disk
        ("assets/\ufb01le.bin", "assets/file.bin"),  # the 'fi' ligature: equal after NFKC
        ("assets/STRASSE", "assets/stra\u00dfe"),  # casefold: ß is ss
    ],
    ids=["case", "nfkc-ligature", "casefold"],
)
def test_paths_that_collide_after_normalisation(tmp_path: Path, first: str, second: str) -> None:
    listed = manifest([*good_members(), member(first, b"1"), member(second, b"2")])
    tar = bundle_tar([*good_entries(), TarEntry(first, b"1"), TarEntry(second, b"2")], listed=listed)
    refused(tmp_path, compress(tar), f"lists {second} and {first}, one name after Unicode and case folding")


def test_file_and_directory_prefix_collision(tmp_path: Path) -> None:
    listed = manifest([*good_members(), member("assets/a", b"1"), member("assets/a/b", b"2")])
    tar = bundle_tar([*good_entries(), TarEntry("assets/a", b"1"), TarEntry("assets/a/b", b"2")], listed=listed)
    refused(tmp_path, compress(tar), "lists assets/a as a file and as a directory of assets/a/b")


# --- member kinds and modes ----------------------------------------------------------------------

KINDS = [
    (TarEntry("assets/model.bin", type=tarfile.SYMTYPE, linkname="/etc/passwd"), "a symbolic link"),
    (TarEntry("assets/model.bin", type=tarfile.LNKTYPE, linkname="recipe.toml"), "a hard link"),
    (TarEntry("assets/model.bin", type=tarfile.CHRTYPE), "a character device"),
    (TarEntry("assets/model.bin", type=tarfile.BLKTYPE), "a block device"),
    (TarEntry("assets/model.bin", type=tarfile.FIFOTYPE), "a FIFO"),
    (TarEntry("assets/model.bin", type=tarfile.DIRTYPE, mode=0o755), "a directory"),
    (TarEntry("assets/model.bin", GOOD_FILES[-1][1], type=tarfile.CONTTYPE), "a contiguous file"),
    (TarEntry("assets/model.bin", GOOD_FILES[-1][1], type=b"S"), "a GNU sparse file"),
]


@pytest.mark.parametrize(("entry", "kind"), KINDS, ids=[k.split()[-1] + "-" + e.type.decode() for e, k in KINDS])
def test_member_that_is_not_a_regular_file(tmp_path: Path, entry: TarEntry, kind: str) -> None:
    tar = bundle_tar(with_entry(-1, entry))
    refused(tmp_path, compress(tar), f"refused member 'assets/model.bin/?': it is {kind}; bundles hold only regular")


def test_symlink_then_a_write_through_it(tmp_path: Path) -> None:
    """The classic pair: a link out of the tree, then a file 'inside' it. The link is refused first."""
    listed = manifest([*good_members(), member("assets/out/x", b"owned")])
    link = TarEntry("assets/out", type=tarfile.SYMTYPE, linkname="..")
    entries = [*good_entries(), link, TarEntry("assets/out/x", b"owned")]
    refused(tmp_path, compress(bundle_tar(entries, listed=listed)), "it is a symbolic link")


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1644], ids=["setuid", "setgid", "sticky"])
def test_member_with_special_mode_bits(tmp_path: Path, mode: int) -> None:
    path, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry(path, data, mode=mode)))
    refused(tmp_path, compress(tar), f"setuid, setgid or sticky bits \\({mode:o}\\)")


# --- the member list against the manifest --------------------------------------------------------


def test_duplicate_member(tmp_path: Path) -> None:
    entries = good_entries()
    entries.insert(2, entries[1])
    refused(tmp_path, compress(bundle_tar(entries)), "refused member 'lock/requirements.txt': it appears twice")


def test_duplicate_member_at_the_end(tmp_path: Path) -> None:
    entries = good_entries()
    entries.append(entries[0])
    refused(tmp_path, compress(bundle_tar(entries)), "refused member 'recipe.toml': it appears twice")


def test_second_manifest(tmp_path: Path) -> None:
    entries = good_entries()
    entries.insert(1, TarEntry(MANIFEST, manifest(good_members()).to_toml()))
    refused(tmp_path, compress(bundle_tar(entries)), "refused member 'bundle.toml': it appears twice")


def test_unlisted_member(tmp_path: Path) -> None:
    entries = good_entries()
    entries.insert(1, TarEntry("wheels/extra-1.0-py3-none-any.whl", b"not in the manifest"))
    refused(tmp_path, compress(bundle_tar(entries)), "'wheels/extra-1.0-py3-none-any.whl': it is not listed")


def test_unlisted_member_at_the_end(tmp_path: Path) -> None:
    entries = [*good_entries(), TarEntry("assets/extra.bin", b"not in the manifest")]
    refused(tmp_path, compress(bundle_tar(entries)), "'assets/extra.bin': it is not listed in the manifest")


def test_missing_member(tmp_path: Path) -> None:
    entries = good_entries()[:-1]
    refused(tmp_path, compress(bundle_tar(entries)), "ends before 1 listed member\\(s\\): assets/model.bin")


def test_members_in_an_unexpected_order(tmp_path: Path) -> None:
    entries = good_entries()
    entries[2], entries[4] = entries[4], entries[2]
    refused(tmp_path, compress(bundle_tar(entries)), "'assets/model.bin' is out of order: expected 'wheels/")


def test_manifest_disagrees_with_a_member_size(tmp_path: Path) -> None:
    """The member's bytes match its digest; only the manifest's size is wrong."""
    members = good_members()
    members[-1] = member(members[-1].path, GOOD_FILES[-1][1])
    listed = manifest([*members[:-1], type(members[-1])(members[-1].path, 100, members[-1].sha256, "asset")])
    refused(tmp_path, compress(bundle_tar(listed=listed)), "'assets/model.bin' is 2304 bytes; the manifest says 100")


def test_header_size_disagrees_with_the_data(tmp_path: Path) -> None:
    """The header claims fewer bytes than follow it: the rest is read as the next header, and refused."""
    path, data, _ = GOOD_FILES[2]
    tar = bundle_tar(with_entry(2, TarEntry(path, data, size=len(data) - 600)))
    refused(tmp_path, compress(tar), "is 900 bytes; the manifest says 1500")


def test_wrong_digest(tmp_path: Path) -> None:
    path, data, _ = GOOD_FILES[-1]
    swapped = bytes(reversed(data))
    tar = bundle_tar(with_entry(-1, TarEntry(path, swapped)))
    refused(tmp_path, compress(tar), f"'assets/model.bin' has sha256 {sha(swapped)}; the manifest says {sha(data)}")


@pytest.mark.parametrize("at", [0, (3 << 20) // 2, (3 << 20) - 1], ids=["first", "middle", "last"])
def test_wrong_digest_of_a_large_member(tmp_path: Path, at: int) -> None:
    """A member of 1 MiB or more is hashed on a second thread while it is decompressed and written: one
    changed byte anywhere in it is refused all the same."""
    path = "assets/model.bin"
    data = bytes(range(256)) * (3 << 12)  # 3 MiB
    changed = bytearray(data)
    changed[at] ^= 1
    members = good_members()
    members[-1] = member(path, data)
    tar = bundle_tar(with_entry(-1, TarEntry(path, bytes(changed))), listed=manifest(members))
    refused(tmp_path, compress(tar), f"'{path}' has sha256 {sha(bytes(changed))}; the manifest says {sha(data)}")
    assert read_unverified(
        write(
            tmp_path / "good.lbz", compress(bundle_tar(with_entry(-1, TarEntry(path, data)), listed=manifest(members)))
        )
    ).members


def test_member_over_the_size_limit(tmp_path: Path) -> None:
    limits = Limits(max_member=2000)
    refused(tmp_path, good_bundle(), "gives assets/model.bin a size of 2304; expected 0..2000", limits=limits)


def test_tar_header_over_the_size_limit(tmp_path: Path) -> None:
    """The manifest is within the limit; a header claims more (before any of its data is read)."""
    path, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry(path, data, size=1 << 20)))
    limits = Limits(max_member=len(data))
    why = f"'assets/model.bin': {1 << 20} bytes is over the limit of {len(data)}"
    refused(tmp_path, compress(tar), why, limits=limits)


def test_member_limit_a_million_tiny_members(tmp_path: Path) -> None:
    """The member limit refuses a manifest listing too many files before any is read (the limit is
    lowered here so the manifest stays small; the default is DEFAULT_LIMITS.max_members)."""
    many = [member(f"assets/{i:07d}", b"") for i in range(11)]
    listed = manifest([*good_members(), *many])
    tar = bundle_tar([*good_entries(), *(TarEntry(m.path) for m in many)], listed=listed)
    refused(tmp_path, compress(tar), "lists 16 members; expected at most 10", limits=Limits(max_members=10))
    assert DEFAULT_LIMITS.max_members < 1_000_000


def test_manifest_too_large_to_read(tmp_path: Path) -> None:
    """A manifest whose header claims 1 GiB (a million members' worth) is refused from the header alone:
    the bundle holds only a few KB, so nothing is read or allocated for it."""
    head = TarEntry(MANIFEST, b"", size=1 << 30)
    refused(tmp_path, compress(tar_bytes([head])), f"the manifest is {1 << 30} bytes; expected at most {16 << 20}")


# --- the manifest itself --------------------------------------------------------------------------


def test_manifest_not_first(tmp_path: Path) -> None:
    listed = manifest(good_members()).to_toml()
    entries = good_entries()
    tar = tar_bytes([entries[0], TarEntry(MANIFEST, listed), *entries[1:]])
    refused(tmp_path, compress(tar), "the bundle's first member is 'recipe.toml'; expected bundle.toml")


@pytest.mark.parametrize(
    ("fmt", "why"),
    [
        (
            1,
            "format 1 \\(made by lockbuild 0.1.0\\); this lockbuild \\(.*\\) reads formats 2, 3, 4, 5 only, and lockbuild 0.1.x",
        ),
        (6, "manifest is format 6 \\(made by lockbuild 0.1.0\\); this lockbuild \\(.*\\) reads formats 2, 3, 4, 5"),
        (0, "manifest format is 0; no lockbuild writes that format"),
    ],
    ids=["older", "newer", "never"],
)
def test_manifest_of_another_format_says_which_lockbuild_reads_it(tmp_path: Path, fmt: int, why: str) -> None:
    listed = manifest(good_members(), format=fmt)
    err = refused(tmp_path, compress(bundle_tar(listed=listed)), why)
    assert err.tip and ("lockbuild" in err.tip or "malformed" in err.tip)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t.replace(b'kind = "wheel"', b'kind = "script"'), "unknown kind 'script'"),
        (lambda t: t.replace(b"size = 2304", b"size = -1"), "a size of -1"),
        (lambda t: t.replace(b"size = 2304", b'size = "2304"'), "files\\[4\\].size is missing or not int"),
        (lambda t: t.replace(b'engine = "toyengine"', b'engine = "../../etc"'), "engine '../../etc' is not a plain"),
        (lambda t: t.replace(b'origin = "https', b"origin = 7 #"), "origin for recipe.toml is not a string"),
        (lambda t: t + b"[[[", "not valid TOML"),
        (lambda t: b"\xff" + t, "not valid TOML"),
        (lambda t: t.replace(b"format = 2", b"format = true"), "format is missing or not int"),
    ],
    ids=["kind", "negative-size", "string-size", "engine-path", "origin-type", "toml", "utf8", "bool-format"],
)
def test_malformed_manifest(tmp_path: Path, change, why: str) -> None:  # type: ignore[no-untyped-def]
    text = manifest(good_members()).to_toml()
    bad = change(text)
    assert bad != text
    refused(tmp_path, compress(bundle_tar(listed=bad)), why)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda t: t.replace(b"[install]\n", b'[install]\nrun-as = "root"\n'),
            "install has the unknown key\\(s\\) run-as",
        ),
        (lambda t: t.replace(b"[install]", b"[installer]"), "unknown key\\(s\\) installer"),
        (lambda t: t.replace(b'uv = "tools/', b'uv = "wheels/'), "install.uv .* is not a member of kind tool"),
        (
            lambda t: t.replace(b'binary = "toyengine"', b'binary = "../../bin/sh"'),
            "install.binary .* not a plain file",
        ),
        (lambda t: t.replace(b'"--version"]', b'"\\u001b[2J"]'), "holds a control character"),
        (lambda t: t.replace(b'gpu-probe = "none"', b'gpu-probe = "/tmp/probe.py"'), "not a plain relative path"),
        (lambda t: t.replace(b"free-gb = 0", b"free-gb = -1"), "install.free-gb is -1"),
        (lambda t: t.replace(b'lock-format = "requirements.txt"', b'lock-format = "x"'), "lock-format 'x' is not"),
        (lambda t: t.replace(b'uv = "0.9.0"', b'uv = "0.9 beta"'), "builder.uv '0.9 beta' is not a plain version"),
    ],
    ids=[
        "unknown-key",
        "no-install-table",
        "uv-not-a-tool",
        "binary-path",
        "verify-escape",
        "probe-absolute",
        "free-negative",
        "lock-format",
        "builder-version",
    ],
)
def test_malformed_install_table(tmp_path: Path, change, why: str) -> None:  # type: ignore[no-untyped-def]
    """The node's instructions are validated as strictly as the file table: nothing it would act on is
    left to interpretation."""
    text = manifest(good_members()).to_toml()
    bad = change(text)
    assert bad != text
    refused(tmp_path, compress(bundle_tar(listed=bad)), why)


def test_manifest_digest_malformed(tmp_path: Path) -> None:
    text = manifest(good_members()).to_toml()
    at = text.index(b'sha256 = "', text.index(b"[[files]]")) + len(b'sha256 = "')
    bad = text[:at] + b"Z" + text[at + 1 :]
    refused(tmp_path, compress(bundle_tar(listed=bad)), "sha256 for recipe.toml is malformed")


def test_manifest_roundtrip() -> None:
    m = manifest(good_members())
    assert parse_manifest(m.to_toml()) == m


# --- the tar stream -------------------------------------------------------------------------------


def test_data_after_the_tar_end(tmp_path: Path) -> None:
    tar = bundle_tar() + b"hidden payload"
    refused(tmp_path, compress(tar), "data after the end of its tar archive")


def test_member_hidden_after_the_tar_end(tmp_path: Path) -> None:
    """A whole extra member after the end-of-archive marker: GNU tar -i would list it; refused."""
    tar = bundle_tar() + tar_bytes([TarEntry("assets/hidden", b"x")])
    refused(tmp_path, compress(tar), "data after the end of its tar archive")


def test_damaged_header_after_the_last_member(tmp_path: Path) -> None:
    """tarfile treats a header that fails its checksum as the end of the archive; the reader refuses."""
    tar = bundle_tar(end=False) + b"X" * BLOCK + bytes(2 * BLOCK)
    refused(tmp_path, compress(tar), "malformed checksum field|fails its checksum")


def test_header_with_a_wrong_checksum(tmp_path: Path) -> None:
    tar = bytearray(bundle_tar())
    first_member = BLOCK + len(manifest(good_members()).to_toml()) + (-len(manifest(good_members()).to_toml()) % BLOCK)
    tar[first_member + 10] ^= 0x01  # one bit of the name of recipe.toml
    refused(tmp_path, compress(bytes(tar)), f"the tar header at offset {first_member} fails its checksum")


def test_non_zero_padding(tmp_path: Path) -> None:
    tar = bytearray(bundle_tar())
    size = len(manifest(good_members()).to_toml())
    tar[BLOCK + size] = 0x41  # the first padding byte after the manifest
    refused(tmp_path, compress(bytes(tar)), "the padding after 'bundle.toml' holds data")


def test_missing_end_of_archive_marker(tmp_path: Path) -> None:
    refused(tmp_path, compress(bundle_tar(end=False)), "truncated: its tar stream ends inside a tar header")


def test_lone_zero_block(tmp_path: Path) -> None:
    refused(tmp_path, compress(bundle_tar(end=False) + bytes(BLOCK)), "ends inside the end-of-archive marker")


def test_zero_block_then_data(tmp_path: Path) -> None:
    tar = bundle_tar(end=False) + bytes(BLOCK) + tar_bytes([TarEntry("assets/hidden", b"x")])
    refused(tmp_path, compress(tar), "a lone zero block")


def test_endless_zero_padding(tmp_path: Path) -> None:
    tar = bundle_tar() + bytes(MAX_TRAILER + RECORD)
    refused(tmp_path, compress(tar), f"more than {MAX_TRAILER} bytes of padding")


@pytest.mark.parametrize(
    ("pax", "why"),
    [
        ((("GNU.sparse.map", "0,10"),), "GNU.sparse.map"),
        ((("linkpath", "/etc/passwd"),), "linkpath"),
        ((("hdrcharset", "BINARY"),), "hdrcharset"),
        ((("path", "../escape"),), "'..' path component"),
        ((("size", "12x"),), "size '12x'"),
    ],
    ids=["sparse", "linkpath", "hdrcharset", "path", "size"],
)
def test_hostile_pax_records(tmp_path: Path, pax: tuple[tuple[str, str], ...], why: str) -> None:
    path, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry(path, data, pax=pax)))
    refused(tmp_path, compress(tar), re.escape(why))


def test_pax_size_overrides_the_header_and_is_checked(tmp_path: Path) -> None:
    path, data, _ = GOOD_FILES[-1]
    tar = bundle_tar(with_entry(-1, TarEntry(path, data, pax=(("size", "10"),))))
    refused(tmp_path, compress(tar), "'assets/model.bin' is 10 bytes; the manifest says 2304")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (TarEntry("assets/model.bin", GOOD_FILES[-1][1], format=tarfile.GNU_FORMAT), "is not POSIX ustar"),
        (TarEntry("assets/model.bin", type=b"g"), "a pax global header"),
        (TarEntry("assets/model.bin", type=b"L"), "a GNU long name"),
        (TarEntry("assets/model.bin", type=b"V"), "a GNU volume header"),
        (TarEntry("assets/model.bin", type=b"Z"), "of tar type b'Z'"),
    ],
    ids=["gnu-magic", "global", "longname", "volume", "unknown"],
)
def test_foreign_tar_headers(tmp_path: Path, entry: TarEntry, why: str) -> None:
    tar = bundle_tar(with_entry(-1, entry))
    refused(tmp_path, compress(tar), re.escape(why))


def test_two_pax_headers_in_a_row(tmp_path: Path) -> None:
    path, data, _ = GOOD_FILES[-1]
    long = "assets/" + "é" * 60  # forces a pax header of its own
    raw = bundle_tar(with_entry(-1, TarEntry(path, data)), end=False)
    pax_only = header(TarEntry(long, b""))[:-BLOCK]  # the pax header and its records, without its member
    tail = header(TarEntry(path, data)) + data + bytes(-len(data) % BLOCK)
    cut = raw.rindex(tail)
    tar = raw[:cut] + pax_only + pax_only + tail + bytes(2 * BLOCK)
    refused(tmp_path, compress(tar), "two pax headers in a row")


# --- the zstd frame -------------------------------------------------------------------------------


def test_trailing_bytes_after_the_zstd_frame(tmp_path: Path) -> None:
    refused(tmp_path, good_bundle() + b"\0", "1 bytes after its zstd frame; expected none")


def test_second_zstd_frame(tmp_path: Path) -> None:
    """zstd -d would happily concatenate a second frame onto the tar. A bundle may hold several frames
    (stored frames carry model weights), but nothing after the archive's end: a frame appended after
    the end-of-archive blocks is refused by the tar reader."""
    extra = compress(tar_bytes([TarEntry("assets/hidden", b"x")]))
    refused(tmp_path, good_bundle() + extra, "data after the end of its tar archive")


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        (2, "ends inside the zstd frame header"),
        (6, "ends inside the zstd block header"),
        (20, "ends inside a zstd block"),
        (-2, "ends inside the zstd checksum"),
    ],
    ids=["magic", "block-header", "block", "checksum"],
)
def test_truncated_bundle(tmp_path: Path, cut: int, why: str) -> None:
    data = good_bundle()
    refused(tmp_path, data[:cut], f"the bundle is truncated: it {why}")


def test_empty_file(tmp_path: Path) -> None:
    refused(tmp_path, b"", "truncated: it ends inside the zstd frame header")


def test_not_zstd(tmp_path: Path) -> None:
    import gzip

    refused(tmp_path, gzip.compress(bundle_tar(), mtime=0), "not a zstd frame: expected magic 0xfd2fb528")


def test_zstd_frame_without_checksum(tmp_path: Path) -> None:
    refused(tmp_path, compress(bundle_tar(), checksum=False), "no content checksum")


def test_zstd_checksum_mismatch(tmp_path: Path) -> None:
    data = bytearray(good_bundle())
    data[-1] ^= 0xFF
    refused(tmp_path, bytes(data), "zstd stream is corrupt")


def test_corrupt_zstd_block(tmp_path: Path) -> None:
    data = bytearray(good_bundle())
    data[len(data) // 2] ^= 0xFF
    refused(tmp_path, bytes(data), "zstd stream is corrupt|sha256|malformed|padding|checksum")


def test_zstd_window_over_the_cap(tmp_path: Path) -> None:
    """The header claims a 1 GiB window (the blocks decode in far less): refused from the header."""
    refused(tmp_path, set_window(good_bundle(), 30), f"zstd window is {1 << 30} bytes; expected at most {1 << 27}")


def test_zstd_window_over_a_lowered_cap(tmp_path: Path) -> None:
    """A real 2 MiB window against a 1 MiB cap: the site's limit applies."""
    data = compress(bundle_tar(), window_log=21)
    limits = Limits(zstd_window=1 << 20)
    refused(tmp_path, data, "zstd window is 2097152 bytes; expected at most 1048576", limits=limits)


def test_zstd_dictionary_id(tmp_path: Path) -> None:
    refused(tmp_path, add_dictionary_id(good_bundle(), 0x1234), "needs a dictionary")


def test_zstd_reserved_block_type(tmp_path: Path) -> None:
    data = bytearray(good_bundle())
    at = frame_header_len(bytes(data))
    data[at] |= 0b110  # block type 3 is reserved
    refused(tmp_path, bytes(data), "reserved block type")


def test_zstd_reserved_header_bit(tmp_path: Path) -> None:
    data = bytearray(good_bundle())
    data[4] |= 0b1000
    refused(tmp_path, bytes(data), "sets a reserved bit")


def test_zstd_content_size_claim_over_the_limit(tmp_path: Path) -> None:
    raw = bundle_tar()
    data = frame(raw_blocks(raw, last=True), content_size=1 << 50)
    refused(tmp_path, data, f"claims {1 << 50} bytes of content")


BOMB = 16 << 30  # 16 GiB


def test_zstd_bomb_single_segment_claim_fails_fast_without_allocating(tmp_path: Path) -> None:
    """A single-segment frame whose header claims 16 GiB: a decoder sizes its buffer from that claim
    (python-zstandard's one-shot decompress() allocates it). The reader refuses it from the header.
    Run in a child with a 4 GiB address-space limit, its peak memory (VmHWM: ru_maxrss would include
    the parent's, inherited across exec) and time measured."""
    data = frame(raw_blocks(bundle_tar(), last=True), content_size=BOMB, single=True)
    bundle = write(tmp_path / NAME, data)
    code = f"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from pathlib import Path
from lockbuild.trust.sign import read_unverified
from lockbuild.errors import InstallError, IntegrityError, LockbuildError
t = time.monotonic()
try:
    read_unverified(Path({str(bundle)!r}), dest=Path({str(tmp_path / "dest")!r}))
except IntegrityError as exc:
    print("refused", exc)
print("seconds", time.monotonic() - t)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]  # this process's own peak RSS
print("peak_kb", hwm[0].split()[1] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"refused the bundle's zstd window is {BOMB} bytes; expected at most {1 << 27}" in out, out
    values = dict(line.split(" ", 1) for line in out.splitlines())
    assert float(values["seconds"]) < 1.0
    assert int(values["peak_kb"]) < 200 << 10, "peak memory stays far below the claimed size"
    assert tree(tmp_path / "dest") == []


def test_zstd_bomb_of_real_zeros_is_cut_short(tmp_path: Path) -> None:
    """A 512 KiB bundle that really decompresses to 16 GiB: a valid bundle, then 16 GiB of zeros
    (RLE blocks), under a header claiming 16 GiB. The reader stops after MAX_TRAILER bytes of them."""
    raw = bundle_tar()
    data = frame(
        [*raw_blocks(raw, last=False), *zero_run_blocks(BOMB - len(raw)), raw_blocks(b"", last=True)[0]],
        content_size=BOMB,
    )
    assert len(data) < 1 << 20
    started = time.monotonic()
    refused(tmp_path, data, f"more than {MAX_TRAILER} bytes of padding")
    assert time.monotonic() - started < 10


def test_structural_walk_needs_no_decompression(tmp_path: Path) -> None:
    """check_zstd_frame accepts the good bundle and leaves the file at its start."""
    bundle = write(tmp_path / NAME, good_bundle())
    with bundle.open("rb") as f:
        f.seek(7)
        check_zstd_frame(f)
        assert f.tell() == 0


# --- the file as signed ---------------------------------------------------------------------------


def signed_bundle(tmp_path: Path, data: bytes) -> tuple[Path, Path]:
    """``data`` as a bundle signed by a fresh key (its manifest as it carries it), and a trust directory."""
    bundle = write(tmp_path / NAME, data)
    (tmp_path / "keys").mkdir()
    secret, public = write_keypair(tmp_path / "keys" / "k", password=None)
    d, head = digest_signed_file(bundle), read_head_raw(bundle)
    st = Statement.of(
        head.manifest,
        name=NAME,
        sha256=d.whole,
        size=d.size,
        expires=None,
        manifest_bytes=head.manifest_bytes,
        frames_sha256=d.frames_sha256,
    )
    signature_path(bundle).write_text(sign_statement(read_secret_key(secret, lambda: ""), st, d.blake2b))
    trust = tmp_path / "trust"
    trust.mkdir()
    shutil.copyfile(public, trust / "k.pub")
    return bundle, trust


CHANGED = b"!" + (bytes(range(256)) * 9)[1:]  # assets/model.bin, one byte altered (same size)


@pytest.mark.parametrize(
    ("swapped_in", "match"),
    [
        (
            lambda: compress(
                bundle_tar(
                    with_entry(4, TarEntry("assets/model.bin", CHANGED)),
                    listed=manifest([*good_members()[:4], member("assets/model.bin", CHANGED)]),
                )
            ),
            r"the bundle's manifest has sha256 [0-9a-f]{64}; the signatures sign",
        ),
        (
            lambda: compress(bundle_tar(with_entry(4, TarEntry("assets/model.bin", CHANGED)))),
            r"member 'assets/model.bin' has sha256 [0-9a-f]{64}; the manifest says",
        ),
        (lambda: compress(bundle_tar(good_entries()[:4])), r"the bundle ends before 1 listed member"),
        (
            lambda: compress(bundle_tar([*good_entries(), TarEntry("assets/extra", b"x")])),
            r"refused member 'assets/extra': it is not listed in the manifest",
        ),
    ],
    ids=["other-manifest", "other-member", "member-missing", "member-added"],
)
def test_bundle_swapped_after_its_signature_was_checked(
    tmp_path: Path, swapped_in: Callable[[], bytes], match: str
) -> None:
    """The signatures are checked on one file, then another is put in its place before it is unpacked.
    The node does not hash the raw file twice: what it uses, the manifest (its exact bytes against the
    signed manifest-sha256) and every member (name, order, size, sha256 against that manifest), is
    checked as it is read, so any change to what the bundle carries is refused."""
    bundle, trust = signed_bundle(tmp_path, good_bundle())
    trusted = open_bundle(bundle, load_trust_store(trust))
    write(tmp_path / "other.lbz", swapped_in()).replace(bundle)
    dest = tmp_path / "dest"
    with pytest.raises(IntegrityError, match=match):
        trusted.extract(dest)


def test_a_swapped_file_that_carries_the_same_contents_is_the_signed_bundle(tmp_path: Path) -> None:
    """Other compressed bytes (another zstd level, the content size in the frame header) for the same manifest and
    members: the node uses exactly the signed manifest and members, so this is what was signed."""
    bundle, trust = signed_bundle(tmp_path, good_bundle())
    trusted = open_bundle(bundle, load_trust_store(trust))
    other = zstandard.ZstdCompressor(level=19, write_checksum=True).compress(bundle_tar())
    assert other != bundle.read_bytes()
    write(tmp_path / "other.lbz", other).replace(bundle)
    assert trusted.extract(tmp_path / "dest").manifest == trusted.manifest
    assert all((tmp_path / "dest" / p).read_bytes() == data for p, data, _ in GOOD_FILES)


def test_sign_reads_the_file_it_hashed(tmp_path: Path) -> None:
    """``expect_sha256`` (lockbuild sign: its statement asserts a file digest taken on an earlier pass):
    the raw bytes read must be that file."""
    bundle = write(tmp_path / NAME, good_bundle())
    other = sha(b"the bytes hashed before")
    (tmp_path / "dest").mkdir()
    with pytest.raises(IntegrityError, match=f"the bundle changed while it was read: sha256 .*, expected {other}"):
        read_unverified(bundle, dest=tmp_path / "dest", expect_sha256=other)
    assert read_unverified(bundle, expect_sha256=sha(bundle.read_bytes())).members


def test_on_manifest_runs_before_any_member_is_written(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    dest = tmp_path / "dest"
    dest.mkdir()

    def refuse(_m: object, _raw: bytes) -> None:
        assert tree(dest) == []
        raise IntegrityError("refused by the caller")

    with pytest.raises(IntegrityError, match="refused by the caller"):
        read_unverified(bundle, dest=dest, on_manifest=refuse)
    assert tree(dest) == []


# --- the destination -----------------------------------------------------------------------------
# The caller passes an empty staging directory; if something was planted in it, the reader neither
# follows nor overwrites it.


def test_planted_symlink_directory_in_the_destination(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "work" / "dest"
    dest.mkdir(parents=True)
    (dest / "wheels").symlink_to(outside, target_is_directory=True)
    with pytest.raises(IntegrityError, match="wheels is not a plain directory"):
        read_unverified(bundle, dest=dest)
    assert tree(outside) == []


def test_planted_symlink_file_in_the_destination(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    victim = write(tmp_path / "victim", b"precious")
    dest = tmp_path / "work" / "dest"
    dest.mkdir(parents=True)
    (dest / "recipe.toml").symlink_to(victim)
    with pytest.raises(IntegrityError, match=r"recipe\.toml already exists"):
        read_unverified(bundle, dest=dest)
    assert victim.read_bytes() == b"precious"


def test_planted_file_in_the_destination_is_not_overwritten(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    dest = tmp_path / "work" / "dest"
    (dest / "lock").mkdir(parents=True)
    write(dest / "lock" / "requirements.txt", b"evil==1.0\n")
    with pytest.raises(IntegrityError, match=r"requirements\.txt already exists"):
        read_unverified(bundle, dest=dest)
    assert (dest / "lock" / "requirements.txt").read_bytes() == b"evil==1.0\n"


def test_destination_that_cannot_be_made(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, good_bundle())
    write(tmp_path / "file", b"")
    with pytest.raises(LockbuildError, match="cannot make the destination") as info:
        read_unverified(bundle, dest=tmp_path / "file" / "dest")
    assert not isinstance(info.value, InstallError), (
        "the reader raises format errors and I/O errors, never InstallError"
    )


def test_missing_bundle(tmp_path: Path) -> None:
    with pytest.raises(LockbuildError, match=r"cannot read the bundle .*: No such file"):
        read_unverified(tmp_path / NAME)


# --- read_head ------------------------------------------------------------------------------------


def test_read_head_refuses_a_recipe_that_is_not_second(tmp_path: Path) -> None:
    entries = good_entries()
    members = good_members()
    listed = manifest([members[1], members[0], *members[2:]])
    bundle = write(tmp_path / NAME, compress(bundle_tar([entries[1], entries[0], *entries[2:]], listed=listed)))
    with pytest.raises(IntegrityError, match=r"does not list recipe\.toml first"):
        read_head(bundle)


def test_read_head_refuses_a_recipe_with_a_wrong_digest(tmp_path: Path) -> None:
    bundle = write(tmp_path / NAME, compress(bundle_tar(with_entry(0, TarEntry("recipe.toml", RECIPE.upper())))))
    with pytest.raises(IntegrityError, match=r"recipe\.toml does not match the manifest's sha256"):
        read_head(bundle)


# --- source and asset archives (install/archives.py) ---------------------------------------------


def unpack_refused(tmp_path: Path, name: str, data: bytes, match: str, *, strip: str | None = None) -> Path:
    """Extract one hostile archive into tmp/work/dest: IntegrityError, nothing outside dest."""
    archive = write(tmp_path / name, data)
    work = tmp_path / "work"
    dest = work / "dest"
    with pytest.raises(IntegrityError, match=match) as info:
        archives.unpack_archive(archive, dest, strip=strip)
    assert info.value.tip
    assert [p.name for p in work.iterdir()] == ["dest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "work"])
    assert not [p for p in dest.rglob("*") if p.is_symlink() or not (p.is_file() or p.is_dir())]
    return dest


def test_archive_baseline_unpacks(tmp_path: Path) -> None:
    entries = [
        TarEntry("engine-1.2", type=tarfile.DIRTYPE, mode=0o755),
        TarEntry("engine-1.2/setup.py", b"x"),
        TarEntry("engine-1.2/bin/run", b"#!/bin/sh\n", mode=0o755),
    ]
    for compression in ("gz", "xz", "bz2"):
        dest = tmp_path / compression
        archive = write(tmp_path / f"engine.tar.{compression}", tar_archive(entries, compression))
        assert archives.unpack_archive(archive, dest, strip="engine-1.2") == 2
        assert tree(dest) == ["bin", "bin/run", "setup.py"]
        assert (dest / "bin" / "run").stat().st_mode & 0o777 == 0o755
    archive = write(tmp_path / "assets.zip", zip_archive([ZipEntry("lib/a.so", b"elf"), ZipEntry("README", b"hi")]))
    assert archives.unpack_archive(archive, tmp_path / "zip") == 2
    assert (tmp_path / "zip" / "lib" / "a.so").read_bytes() == b"elf"


ARCHIVE_ATTACKS = [
    ("traversal", [TarEntry("../evil", b"x")], "'..' path component"),
    ("deep-traversal", [TarEntry("top/../../evil", b"x")], "'..' path component"),
    ("absolute", [TarEntry("/tmp/evil", b"x")], "an absolute path"),
    ("symlink", [TarEntry("top/link", type=tarfile.SYMTYPE, linkname="/etc")], "it is a link"),
    (
        "hardlink",
        [TarEntry("top/a", b"x"), TarEntry("top/b", type=tarfile.LNKTYPE, linkname="/etc/passwd")],
        "it is a link",
    ),
    ("chardev", [TarEntry("top/null", type=tarfile.CHRTYPE)], "a device or FIFO"),
    ("blockdev", [TarEntry("top/sda", type=tarfile.BLKTYPE)], "a device or FIFO"),
    ("fifo", [TarEntry("top/pipe", type=tarfile.FIFOTYPE)], "a device or FIFO"),
    ("setuid", [TarEntry("top/su", b"x", mode=0o4755)], "setuid, setgid or sticky"),
    ("setgid-dir", [TarEntry("top", type=tarfile.DIRTYPE, mode=0o2775)], "setuid, setgid or sticky"),
    ("duplicate", [TarEntry("top/a", b"1"), TarEntry("top/a", b"2")], "collides with another entry"),
    ("case-collision", [TarEntry("top/Makefile", b"1"), TarEntry("top/makefile", b"2")], "collides"),
    ("file-then-dir", [TarEntry("top/a", b"1"), TarEntry("top/a/b", b"2")], "top/a to be a directory"),
    ("dir-then-file", [TarEntry("top/a/b", b"1"), TarEntry("top/a", b"2")], "collides with another entry"),
]


@pytest.mark.parametrize("compression", ["gz", "xz"])
@pytest.mark.parametrize(("entries", "why"), [a[1:] for a in ARCHIVE_ATTACKS], ids=[a[0] for a in ARCHIVE_ATTACKS])
def test_hostile_tar_archive(tmp_path: Path, compression: str, entries: list[TarEntry], why: str) -> None:
    unpack_refused(tmp_path, f"src.tar.{compression}", tar_archive(entries, compression), why)


ZIP_ATTACKS = [
    ("traversal", [ZipEntry("../evil", b"x")], "'..' path component"),
    ("absolute", [ZipEntry("/tmp/evil", b"x")], "an absolute path"),
    ("backslash", [ZipEntry("..\\evil", b"x")], "a backslash"),
    ("symlink", [ZipEntry("link", b"/etc", mode=0o120777)], "a symbolic link"),
    ("chardev", [ZipEntry("null", mode=0o020666)], "a device, FIFO or socket"),
    ("fifo", [ZipEntry("pipe", mode=0o010644)], "a device, FIFO or socket"),
    ("setuid", [ZipEntry("su", b"x", mode=0o104755)], "setuid, setgid or sticky"),
    ("duplicate", [ZipEntry("a", b"1"), ZipEntry("a", b"2")], "collides with another entry"),
]


@pytest.mark.parametrize(("entries", "why"), [a[1:] for a in ZIP_ATTACKS], ids=[a[0] for a in ZIP_ATTACKS])
def test_hostile_zip_archive(tmp_path: Path, entries: list[ZipEntry], why: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        data = zip_archive(entries)
    unpack_refused(tmp_path, "assets.zip", data, re.escape(why))


@pytest.mark.parametrize(
    ("limits", "entries"),
    [
        (Limits(max_member=3), [TarEntry("top/big", b"four")]),
        (Limits(max_bundle=5), [TarEntry("top/a", b"abc"), TarEntry("top/b", b"def")]),
        (Limits(max_members=2), [TarEntry(f"top/{i}", b"x") for i in range(3)]),
    ],
    ids=["one-file-too-large", "all-files-too-large", "too-many-files"],
)
def test_an_archive_past_the_limits_is_refused(tmp_path: Path, limits: Limits, entries: list[TarEntry]) -> None:
    archive = write(tmp_path / "src.tar.gz", tar_archive(entries))
    with pytest.raises(IntegrityError, match="the archive is larger than the limits allow"):
        archives.unpack_archive(archive, tmp_path / "dest", limits=limits)
    assert archives.unpack_archive(archive, tmp_path / "ok") == len(entries)  # the default limits take it


def test_two_archives_colliding(tmp_path: Path) -> None:
    """Two release assets unpacked into one directory may not overwrite each other's files."""
    first = write(tmp_path / "a.tar.gz", tar_archive([TarEntry("lib/libengine.so", b"good")]))
    second = write(tmp_path / "b.zip", zip_archive([ZipEntry("lib/libengine.so", b"evil")]))
    dest = tmp_path / "work" / "dest"
    archives.unpack_archive(first, dest)
    with pytest.raises(IntegrityError, match=r"b\.zip: refused entry 'lib/libengine\.so': a file of that name"):
        archives.unpack_archive(second, dest)
    assert (dest / "lib" / "libengine.so").read_bytes() == b"good"
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["dest"]


def test_archive_file_where_an_earlier_one_has_a_directory(tmp_path: Path) -> None:
    first = write(tmp_path / "a.tar.gz", tar_archive([TarEntry("lib/x.so", b"1")]))
    second = write(tmp_path / "b.tar.gz", tar_archive([TarEntry("lib", b"2")]))
    dest = tmp_path / "work" / "dest"
    archives.unpack_archive(first, dest)
    with pytest.raises(IntegrityError, match="a file of that name is already there"):
        archives.unpack_archive(second, dest)


def test_truncated_tar_gz(tmp_path: Path) -> None:
    data = tar_archive([TarEntry("top/big", bytes(range(256)) * 4000)])
    unpack_refused(tmp_path, "src.tar.gz", data[: len(data) // 2], "cannot unpack the archive")


def test_corrupt_tar_xz(tmp_path: Path) -> None:
    data = bytearray(tar_archive([TarEntry("top/big", bytes(range(256)) * 4000)], "xz"))
    data[len(data) // 2] ^= 0xFF
    unpack_refused(tmp_path, "src.tar.xz", bytes(data), "cannot unpack the archive")


def test_zip_with_a_bad_crc(tmp_path: Path) -> None:
    data = zip_archive([ZipEntry("a.bin", bytes(range(256)) * 40)])
    at = data.index(b"a.bin") + len("a.bin")  # the deflated data follows the local header's name
    bad = data[: at + 5] + bytes([data[at + 5] ^ 0x01]) + data[at + 6 :]
    unpack_refused(tmp_path, "assets.zip", bad, "cannot unpack the archive")


def test_not_an_archive(tmp_path: Path) -> None:
    unpack_refused(tmp_path, "assets.zip", b"not a zip at all", "cannot unpack the archive")


@pytest.mark.parametrize("with_dir_entry", [False, True], ids=["file", "dir-then-file"])
def test_a_link_in_the_destination_is_never_written_through(tmp_path: Path, with_dir_entry: bool) -> None:
    """An environment holds links of its own (bin/python, lib64 -> lib). An archive entry under one of them
    would resolve outside the destination: refused, and nothing is written where the link points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "work" / "dest"
    dest.mkdir(parents=True)
    (dest / "lib64").symlink_to(outside)
    entries = [TarEntry("lib64", type=tarfile.DIRTYPE, mode=0o755)] if with_dir_entry else []
    archive = write(tmp_path / "a.tar.gz", tar_archive([*entries, TarEntry("lib64/evil.so", b"x")]))
    with pytest.raises(IntegrityError, match="link or a file") as info:
        archives.unpack_archive(archive, dest)
    assert info.value.tip
    assert list(outside.iterdir()) == []
    with pytest.raises(IntegrityError, match="resolve outside the destination"):
        archives.place_file(archive, dest, "lib64/copy.tar.gz")
    assert list(outside.iterdir()) == []
