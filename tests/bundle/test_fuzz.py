"""Fuzzing the parsers that meet untrusted bytes: the bundle reader, the signature parser, the recipe
parser, and the builder's reading of index pages (and the file picker on what it read). Whatever the input, the only exceptions allowed are lockbuild's own family, and the
bundle reader writes nothing outside its destination directory.

Budgets: the default ("ci") profile runs a couple of hundred examples per test, a few seconds in all.
For a long run (100,000 examples per test) set HYPOTHESIS_PROFILE=long, for instance

    HYPOTHESIS_PROFILE=long pytest tests/bundle/test_fuzz.py -x -q -p no:randomly

or HYPOTHESIS_EXAMPLES=N for any other count. Found inputs are printed by hypothesis; none is stored
(database=None), so the run leaves nothing behind in the working tree.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from hostile import (
    BLOCK,
    GOOD_FILES,
    ZSTD_MAGIC,
    TarEntry,
    bundle_tar,
    compress,
    good_bundle,
    manifest,
    member,
    tar_bytes,
)
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from lockbuild.bundle.manifest import MANIFEST
from lockbuild.bundle.read import read_head
from lockbuild.errors import LockbuildError, RecipeError, SignatureError
from lockbuild.limits import Limits
from lockbuild.minisign import generate_secret_key, parse_public_key, parse_signatures, sign_prehashed
from lockbuild.recipe import parse_recipe
from lockbuild.trust.sign import read_unverified
from lockbuild.trust.statement import format_trusted_comment, parse_trusted_comment

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", 100_000 if PROFILE == "long" else 150))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# Small bounds so that no input, however it is mutated, makes a run slow; the checks are the same.
LIMITS = Limits(max_member=1 << 20, max_bundle=8 << 20, max_members=64, max_manifest=64 << 10)


# --- mutations --------------------------------------------------------------------------------------


def mutations(size_hint: int) -> st.SearchStrategy[list[tuple[str, int, bytes]]]:
    op = st.sampled_from(["flip", "set", "insert", "delete", "truncate", "copy"])
    value = st.one_of(
        st.binary(min_size=1, max_size=16),
        st.text(min_size=1, max_size=16).map(str.encode),
        st.sampled_from(
            [
                b'"',
                b"=",
                b"\n",
                b"[[files]]\n",
                b"0",
                b"-1",
                b"true",
                b"'",
                b"[",
                b"]",
                b"{",
                b"}",
                b",",
                b"\\",
                b"\0",
                b"/",
                b"..",
                b"\xff",
            ]
        ),
    )
    one = st.tuples(op, st.integers(0, size_hint), value)
    return st.lists(one, min_size=1, max_size=6)


def mutate(data: bytes, ops: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for op, at, value in ops:
        at = at % (len(out) + 1)
        if op == "flip" and at < len(out):
            out[at] ^= value[0] or 1
        elif op == "set":
            out[at : at + len(value)] = value
        elif op == "insert":
            out[at:at] = value
        elif op == "delete":
            del out[at : at + value[0] % 64 + 1]
        elif op == "truncate":
            del out[at:]
        elif op == "copy" and out:
            start = value[0] * 37 % len(out)
            out[at:at] = out[start : start + value[-1] + 1]
    return bytes(out)


# --- TOML documents with wrong values -----------------------------------------------------------------

TOML_VALUES = st.recursive(
    st.one_of(
        st.text(max_size=30),
        st.integers(),
        st.booleans(),
        st.floats(allow_nan=False),
        st.datetimes(timezones=st.sampled_from([dt.UTC, None])),
        st.dates(),
        st.sampled_from(
            [
                "",
                "..",
                "/abs",
                "a/../b",
                "eng==1.0",
                "https://x.invalid/a.tar.gz",
                "3.12",
                "7.5",
                "x86_64-manylinux_2_28",
                "torch",
                "none",
                "-e .",
                "name @ https://x",
                "ab" * 32,
            ]
        ),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in nested tables and lists."""
    found = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            found += paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found += paths(v, (*prefix, i))
    return found


def replaced(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy: Any = dict(data) if isinstance(data, dict) else list(data)
    copy[path[0]] = replaced(copy[path[0]], path[1:], value)
    return copy


def dumped_with(data: Any, changes: list[tuple[tuple[Any, ...], Any]]) -> str:
    """``data`` with each change applied (paths an earlier change removed are skipped), as TOML text;
    the example is rejected if tomlkit cannot write a generated value."""
    for path, value in changes:
        try:
            data = replaced(data, path, value)
        except (KeyError, IndexError, TypeError):
            continue
    try:
        return tomlkit.dumps(data)
    except Exception:  # tomlkit cannot write every generated value
        reject()


# --- the bundle reader --------------------------------------------------------------------------------


def mutated_text(text: str, ops: list[tuple[str, int, bytes]]) -> str:
    return mutate(text.encode(), ops).decode("utf-8", "replace")


def read_anything(data: bytes) -> None:
    """Read ``data`` as a bundle into root/work/dest (and its head); only LockbuildError may come out,
    and nothing may appear outside dest, nor anything but directories and regular files inside it."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        bundle = root / "x.lbz"
        bundle.write_bytes(data)
        work = root / "work"
        dest = work / "dest"
        dest.mkdir(parents=True)
        with contextlib.suppress(LockbuildError):
            read_unverified(bundle, dest=dest, limits=LIMITS)
        with contextlib.suppress(LockbuildError):
            read_head(bundle, limits=LIMITS)
        assert sorted(os.listdir(root)) == ["work", "x.lbz"]
        assert os.listdir(work) == ["dest"]
        for p in dest.rglob("*"):
            assert not p.is_symlink() and (p.is_dir() or p.is_file()), p


GOOD = good_bundle()
GOOD_TAR = bundle_tar()
GOOD_MANIFEST = manifest([member(p, d, k) for p, d, k in GOOD_FILES]).to_toml()


@FUZZ
@given(st.one_of(st.binary(max_size=2048), st.binary(max_size=512).map(lambda b: ZSTD_MAGIC + b)))
def test_reader_on_arbitrary_bytes(data: bytes) -> None:
    read_anything(data)


@FUZZ
@given(mutations(len(GOOD)))
def test_reader_on_a_mutated_bundle(ops: list[tuple[str, int, bytes]]) -> None:
    read_anything(mutate(GOOD, ops))


@FUZZ
@given(mutations(len(GOOD_TAR) // 4))
def test_reader_on_a_mutated_tar_stream(ops: list[tuple[str, int, bytes]]) -> None:
    """The tar stream is mutated, then compressed into a valid frame: the tar reader and the manifest
    parser see the damage, not the zstd checksum."""
    read_anything(compress(mutate(GOOD_TAR, ops)))


FIELDS = {
    "name": (0, 100),
    "mode": (100, 8),
    "size": (124, 12),
    "type": (156, 1),
    "linkname": (157, 100),
    "magic": (257, 8),
    "prefix": (345, 155),
}


def header_offsets(tar: bytes) -> list[int]:
    offsets, at = [], 0
    while at + BLOCK <= len(tar) and tar[at : at + BLOCK] != bytes(BLOCK):
        offsets.append(at)
        size = int(tar[at + 124 : at + 136].split(b"\0")[0] or b"0", 8)
        at += BLOCK + size + (-size % BLOCK)
    return offsets


HEADERS = header_offsets(GOOD_TAR)
FIELD_VALUES = st.one_of(
    st.binary(max_size=12),
    st.sampled_from(
        [
            b"../x",
            b"/etc/x",
            b"2",
            b"1",
            b"5",
            b"x",
            b"g",
            b"L",
            b"S",
            b"7777",
            b"4755",
            b"77777777777",
            b"ustar  \0",
            b"bundle.toml",
            b"recipe.toml",
            b"0",
            b"\0",
        ]
    ),
)


def fix_checksum(tar: bytearray, at: int) -> None:
    header = tar[at : at + BLOCK]
    header[148:156] = b" " * 8
    tar[at + 148 : at + 156] = b"%06o\0 " % sum(header)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(HEADERS), st.sampled_from(sorted(FIELDS)), FIELD_VALUES), max_size=4))
def test_reader_on_tar_headers_with_valid_checksums(changes: list[tuple[int, str, bytes]]) -> None:
    """Header fields replaced (names, types, modes, sizes, magic) and the checksums made right again,
    so every change reaches the checks behind the checksum."""
    tar = bytearray(GOOD_TAR)
    for at, field, value in changes:
        start, length = FIELDS[field]
        tar[at + start : at + start + length] = value[:length].ljust(length, b"\0")
        fix_checksum(tar, at)
    read_anything(compress(bytes(tar)))


PARTS = ["a", "A", "..", ".", "", "é", "e\u0301", "\ufb01", "wheels", "x.whl", "\\", "\n", "bundle.toml", "recipe.toml"]
NAMES = st.lists(st.sampled_from(PARTS), min_size=1, max_size=4).map("/".join)
KINDS = st.sampled_from([b"0", b"\0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"g"])


@FUZZ
@given(
    st.lists(
        st.tuples(NAMES, st.binary(max_size=40), KINDS, st.sampled_from([0o644, 0o755, 0o4755, 0o1777])), max_size=6
    ),
    st.booleans(),
    st.booleans(),
)
def test_reader_on_generated_members(
    items: list[tuple[str, bytes, bytes, int]], listed_consistently: bool, manifest_first: bool
) -> None:
    """Bundles of generated members with hostile names, kinds and modes, listed in the manifest (or not)."""
    entries = [
        TarEntry(name, data if kind in (b"0", b"\0") else b"", type=kind, mode=mode) for name, data, kind, mode in items
    ]
    listed = [member(e.name, e.data) for e in entries] if listed_consistently else [member("assets/a", b"")]
    head = TarEntry(MANIFEST, manifest(listed).to_toml())
    read_anything(compress(tar_bytes([head, *entries] if manifest_first else [*entries, head])))


@FUZZ
@given(mutations(len(GOOD_MANIFEST)))
def test_reader_on_a_mutated_manifest(ops: list[tuple[str, int, bytes]]) -> None:
    """The manifest's TOML text is mutated; the tar around it stays well formed."""
    read_anything(compress(bundle_tar(listed=mutate(GOOD_MANIFEST, ops))))


MANIFEST_DATA = tomllib.loads(GOOD_MANIFEST.decode())


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(paths(MANIFEST_DATA)[1:]), TOML_VALUES), min_size=1, max_size=4))
def test_reader_on_manifests_with_wrong_values(changes: list[tuple[tuple[Any, ...], Any]]) -> None:
    """Valid TOML, wrong values (types, paths, sizes, digests, kinds): the manifest's validation."""
    text = dumped_with(MANIFEST_DATA, changes)
    read_anything(compress(bundle_tar(listed=text.encode())))


# --- the signature parser -------------------------------------------------------------------------------

KEY = generate_secret_key()
PUB_TEXT = KEY.public_key().to_text()
SIG_TEXT = "".join(
    sign_prehashed(KEY, bytes(64), format_trusted_comment({"file": f"b{i}.lbz", "sha256": "00" * 32, "serial": "1"}))
    for i in range(2)
)


def only_signature_errors(fn: Any, *args: Any) -> None:
    with contextlib.suppress(SignatureError):
        fn(*args)


@FUZZ
@given(st.one_of(st.binary(max_size=1024), st.text(max_size=1024)))
def test_signature_parser_on_arbitrary_input(data: bytes | str) -> None:
    only_signature_errors(parse_signatures, data)


@FUZZ
@given(mutations(len(SIG_TEXT)))
def test_signature_parser_on_mutated_signatures(ops: list[tuple[str, int, bytes]]) -> None:
    data = mutate(SIG_TEXT.encode(), ops)
    only_signature_errors(parse_signatures, data)
    only_signature_errors(parse_signatures, data.decode("utf-8", "replace"))


@FUZZ
@given(st.one_of(st.text(max_size=300), mutations(len(PUB_TEXT)).map(lambda ops: mutated_text(PUB_TEXT, ops))))
def test_public_key_parser(text: str) -> None:
    only_signature_errors(parse_public_key, text)


COMMENT = SIG_TEXT.split("\n")[2].removeprefix("trusted comment: ")


@FUZZ
@given(
    st.one_of(
        st.text(max_size=300),
        st.text(max_size=40).map(lambda t: COMMENT + t),
        mutations(len(COMMENT)).map(lambda ops: mutated_text(COMMENT, ops)),
    )
)
def test_trusted_comment_parser(text: str) -> None:
    only_signature_errors(parse_trusted_comment, text)


@FUZZ
@given(st.dictionaries(st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True), st.text(max_size=60), max_size=8))
def test_trusted_comment_roundtrip(fields: dict[str, str]) -> None:
    try:
        text = format_trusted_comment(fields)
    except SignatureError:
        return
    assert parse_trusted_comment(text) == fields


# --- the recipe parser ------------------------------------------------------------------------------------

RECIPE = """\
[engine]
name = "eng"
pypi = "eng"
repo = "owner/eng"
binary = "eng"
verify = ["eng", "--version"]
gpu-probe = "torch"

[[builds]]
version = "1.0"
variant = "cu128"
python = "3.12"
platform = "x86_64-manylinux_2_28"
requirements = ["eng==1.0", "torch==2.8.0"]
as-of = "2025-10-05T01:40:00Z"
free-gb = 30
gpu = { min-capability = "7.5", min-driver = "580" }
index = { url = "https://download.example/whl/cu128", packages = ["torch"] }
source = { url = "https://example.org/eng-1.0.tar.gz", sha256 = "%s", top = "eng-1.0", dir = "src", \
requirements = "r.txt" }
wheel = { repo = "owner/eng", tag = "v1.0", prefix = "eng-", suffix = "-linux_x86_64.whl", project = "eng" }
assets = { tag = "v1.0", dir = "share/eng", files = ["eng-cuda.tar.gz"] }
pin-sha256 = { torch = "%s" }
exclude-newer-package = { setuptools = "2024-06-01T00:00:00Z", wheel = false }
build-on-node = ["docopt"]
""" % ("ab" * 32, "cd" * 32)  # noqa: UP031
RECIPE_DATA = tomllib.loads(RECIPE)


def only_recipe_errors(text: str) -> None:
    with contextlib.suppress(RecipeError):
        parse_recipe(text, "fuzz.toml")


def test_the_recipe_template_is_valid() -> None:
    assert parse_recipe(RECIPE).builds[0].variant == "cu128"


@FUZZ
@given(st.text(max_size=2000))
def test_recipe_parser_on_arbitrary_text(text: str) -> None:
    only_recipe_errors(text)


@FUZZ
@given(mutations(len(RECIPE)))
def test_recipe_parser_on_mutated_text(ops: list[tuple[str, int, bytes]]) -> None:
    only_recipe_errors(mutated_text(RECIPE, ops))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(paths(RECIPE_DATA)[1:]), TOML_VALUES), min_size=1, max_size=4))
def test_recipe_parser_on_valid_toml_with_wrong_values(changes: list[tuple[tuple[Any, ...], Any]]) -> None:
    """The template with values swapped for others of any type: the validators, not the TOML parser."""
    only_recipe_errors(dumped_with(RECIPE_DATA, changes))


# --- index pages and the file picker ------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
NAMES = st.sampled_from(
    [
        "pkg-1.0-py3-none-any.whl",
        "pkg-1.0.tar.gz",
        "pkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        "pkg-2.0.zip",
        "other-1.0-py3-none-any.whl",
        "pkg-1.0\x1b-py3-none-any.whl",
        "../pkg-1.0.tar.gz",
        "pkg",
        "",
    ]
) | st.text(max_size=40)
TIMES = (
    st.sampled_from(
        ["2025-01-01T00:00:00Z", "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59Z", "2025-01-01", "x", ""]
    )
    | JSON
)
ENTRY = st.fixed_dictionaries(
    {"filename": NAMES, "url": st.sampled_from(["f", "https://x/f", "//h/f"]) | JSON},
    optional={
        "hashes": st.dictionaries(st.sampled_from(["sha256", "md5"]), st.sampled_from(["a" * 64, "A" * 64]) | JSON),
        "upload-time": TIMES,
        "yanked": st.booleans() | st.text(max_size=20) | JSON,
        "size": st.integers() | JSON,
    },
)
PAGE = st.one_of(JSON, st.fixed_dictionaries({"files": st.lists(ENTRY | JSON, max_size=6)}))


@FUZZ
@given(PAGE, st.sampled_from(["1.0", "1", "2.0", "1.0+cu129"]), st.booleans())
def test_index_page_and_file_picker_raise_only_lockbuild_errors(page: Any, version: str, one_file: bool) -> None:
    from lockbuild.fetch.index import parse_project_page
    from lockbuild.lock import Candidate, Pin, choose_file
    from lockbuild.target import Target

    try:
        files = parse_project_page(page, "https://i.example/simple/pkg/", what="fuzz")
        cands = [Candidate(f.filename, f.url, f.sha256, f.size, f.upload_time, f.yanked, f.yank_reason) for f in files]
        pin = Pin("pkg", version, frozenset(c.sha256 for c in cands if c.sha256))
        choose_file(
            pin,
            cands,
            Target.of("3.12", "x86_64-manylinux_2_28"),
            origin="second",
            as_of=dt.datetime(2025, 6, 1, tzinfo=dt.UTC),
            one_file=one_file,
        )
    except LockbuildError:
        pass
