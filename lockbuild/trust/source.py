"""The one port: what every source of a signed bundle must be able to hand over, and nothing more.

A source is plain I/O (as pypa/installer's ``WheelSource``): its signature file, its manifest's exact bytes,
its frames or members in order. It decides nothing. :class:`BundleFile` is here; the other adapters are in
``site/sources.py``, ``registry/artifact.py`` and ``image/imagefile.py`` (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lockbuild.bundle.extract import TIP, Piece
from lockbuild.bundle.read import open_file, open_stream, read_head_raw, read_manifest, tar_pieces
from lockbuild.digest import digest_exactly
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.frames.framepool import count_frames
from lockbuild.frames.seektable import FrameTable, is_framed, read_tables
from lockbuild.fsio import open_regular, read_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.scheme import SCHEME, Block
from lockbuild.trust.scheme import signature_path as signature_path

TIP_AGAIN = "Fetch the bundle again from its publisher (or import or pull it again), then retry."


class SizeCheck(Protocol):
    def __call__(self, size: int, *, assembles: bool = False) -> None: ...


class Signed(Protocol):
    """What the one trust decision reads of a signed thing: its blocks, the signed file's digests where it
    is one, and the exact bytes of the statement's subject (a bundle's manifest, an image's record)."""

    @property
    def label(self) -> str:
        """How messages name it (a path, a store build, a registry reference)."""
        ...

    @property
    def file_name(self) -> str | None:
        """The file name the signed statements must name; None: the name they give, which must then be
        the manifest's own (a store names builds, not files)."""
        ...

    @property
    def subject(self) -> str:
        """How messages name the bytes ``manifest_bytes`` returns ("the bundle's manifest", "the record
        FILE.sqfs.json")."""
        ...

    def signature_blocks(self, limits: Limits) -> bytes:
        """The signature file's bytes (``.minisig``), bounded by ``limits.max_signature_file``; the scheme
        (``trust/scheme.py``) parses them."""
        ...

    def file_digests(self, check: SizeCheck, limits: Limits) -> FileDigests | None:
        """For a source that is the signed file itself: its size (passed to ``check`` before a byte is
        read; with ``assembles=True`` before a file is put together from pieces) and sha256. None for a
        source that holds the manifest and members without the file."""
        ...

    def manifest_bytes(self, limits: Limits, signed_sha256: str | None = None) -> bytes:
        """The subject's exact bytes (read only after the signature blocks met the policy). With
        ``signed_sha256``, the digest the counted signatures sign: a source that would have to request
        the manifest by another digest refuses before it requests anything."""
        ...


class Source(Signed, Protocol):
    """Where a signed bundle comes from: a :class:`Signed` whose subject is a bundle manifest, and whose
    members it hands over."""

    @property
    def expect_ref(self) -> str | None:
        """ENGINE/VERSION-VARIANT the user asked for, when the source is named that way."""
        ...

    @property
    def where(self) -> str:
        """How a refused member's message names what held it ("the bundle", "the delta", a store build)."""
        ...

    @property
    def absent_tip(self) -> str:
        """What to do when members the signed manifest lists are missing from this source."""
        ...

    @property
    def damage_tip(self) -> str:
        """What to do when a member is not the one the signed manifest lists."""
        ...

    @property
    def partial(self) -> bool:
        """True for a source that may lack members by design (a delta verified without its store):
        ``verify`` then reports them; every other use still requires them all."""
        ...

    def members(self, limits: Limits) -> AbstractContextManager[Stream]:
        """The members after the manifest, as pieces, in the order the source holds them."""
        ...

    def check_frames(self, limits: Limits) -> int | None:
        """For a framed file whose frame tables the decision bound (``file_digests``): every frame hashed
        against them, none decompressed; how many. None: no frame tables (then the members are checked)."""
        ...


@dataclass(frozen=True)
class Stream:
    """A source's members. ``manifest_bytes``: the manifest as the stream carries it again (a file read
    a second time), or None when the source holds it once; the trust side compares it."""

    manifest_bytes: bytes | None
    pieces: Iterator[Piece]


class BundleFile:
    """A ``.lbz`` with its ``.minisig`` beside it."""

    def __init__(self, path: Path, *, signatures: Path | None = None) -> None:
        self.path = path
        self.signatures = signatures or signature_path(path)
        self.label = str(path)
        self.where = "the bundle"
        self.file_name: str | None = path.name
        self.expect_ref: str | None = None
        self.subject = "the bundle's manifest"
        self.absent_tip = TIP_AGAIN
        self.damage_tip = TIP
        self.partial = False
        self._table: FrameTable | None = None  # the frame tables whose sha256 file_digests handed over

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        try:
            return read_regular(
                self.signatures, what="signature file", max_size=limits.max_signature_file, error=SignatureError
            )
        except FileNotFoundError:
            raise SignatureError(
                f"no signature file {self.signatures}; expected the bundle's .minisig beside it.",
                tip="Copy the .lbz.minisig that was published with the bundle next to it.",
            ) from None

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> FileDigests:
        """A framed file: its size and its frame tables' sha256 (the file is read once, later, frame by frame
        against these tables); a file made before frames: its size and sha256."""
        digests, self._table = _digests(self.path, limits, check, prehash=False, whole=False, what="bundle")
        return digests

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        if self._table is None:
            return read_head_raw(self.path, limits).manifest_bytes
        with _TarMembers(self.path, limits, self._table) as stream:
            return stream.manifest_bytes or b""

    def members(self, limits: Limits = DEFAULT_LIMITS) -> AbstractContextManager[Stream]:
        return _TarMembers(self.path, limits, self._table)

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> int | None:
        if self._table is None:
            return None
        with open_file(self.path, limits) as f:
            return count_frames(f, self._table, limits)


class _TarMembers:
    """The tar stream of a ``.lbz`` after its manifest (the manifest is read again and must be the same
    bytes the trust decision bound: the extraction's caller compares them)."""

    def __init__(self, path: Path, limits: Limits, table: FrameTable | None = None) -> None:
        self.path, self.limits, self.table = path, limits, table

    def __enter__(self) -> Stream:
        self.f = open_file(self.path, self.limits)
        try:
            tar = open_stream(self.f, self.limits, table=self.table)
            _, again = read_manifest(tar, self.limits)
        except BaseException:
            self.f.close()
            raise
        return Stream(again, iter(tar_pieces(tar, self.limits)))

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def read_signatures(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Block, ...]:
    """The blocks of a ``.minisig`` (a regular file of at most ``limits.max_signature_file`` bytes)."""
    try:
        raw = read_regular(path, what="signature file", max_size=limits.max_signature_file, error=SignatureError)
    except FileNotFoundError:
        raise SignatureError(
            f"no signature file {path}; expected the bundle's .minisig beside it.",
            tip="Copy the .lbz.minisig that was published with the bundle next to it.",
        ) from None
    return SCHEME.parse(raw, source=str(path), max_bytes=limits.max_signature_file)


def digest_signed_file(
    path: Path,
    limits: Limits = DEFAULT_LIMITS,
    check: Callable[[int], None] | None = None,
    *,
    prehash: bool = True,
    what: str = "bundle",
) -> FileDigests:
    """Open the signed file (a regular file, bounded), run ``check(size)`` before reading a byte, then hash
    it in one pass: sha256, and with ``prehash`` BLAKE2b-512 beside it (minisign's prehash, needed to sign
    the file; the node's check needs only the sha256 and size, see trust/policy.py); for a bundle (``what``),
    a framed one's frame tables, checked, and their sha256 too (an image or a report has none)."""
    return _digests(path, limits, check, prehash=prehash, whole=True, what=what)[0]


def _digests(
    path: Path, limits: Limits, check: Callable[[int], None] | None, *, prehash: bool, whole: bool, what: str
) -> tuple[FileDigests, FrameTable | None]:
    """As :func:`digest_signed_file`; without ``whole``, a framed file is not hashed whole: its tables alone
    are read (and checked) before any frame."""
    try:
        f, size = open_regular(path, what=what, max_size=limits.max_bundle, error=IntegrityError)
    except FileNotFoundError:
        raise IntegrityError(f"the {what} {path} does not exist.", tip="Check the path.") from None
    with f:
        if check is not None:
            check(size)
        table = read_tables(f, size, limits) if what == "bundle" and is_framed(f, size) else None
        frames = (table.sha256, len(table.frames)) if table is not None else (None, None)
        if table is not None and not whole:
            return FileDigests(size, None, None, *frames), table
        f.seek(0)
        return FileDigests(size, *digest_exactly(f, size, what=f"the {what} {path}", blake2b=prehash), *frames), table
