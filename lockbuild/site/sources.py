"""The site wing's sources behind the one trust port (``lockbuild.trust.source``): plain I/O, no decision.

:class:`PartsFile` (joined, never past the size the trusted signatures sign), :class:`DeltaFile` (its
members, the rest from the store) and :class:`StoreBuild` (a store's build) hand over blocks, the
manifest's bytes and member pieces. No network code: a node reads these from local or shared disk."""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, overload

from lockbuild.bundle.extract import TIP, AbsentPiece, FilePiece, Piece
from lockbuild.bundle.manifest import MANIFEST, Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.read import TarPiece, open_stream
from lockbuild.bundle.tar import TarReader, check_header, copy_member
from lockbuild.choice.choose import Offered
from lockbuild.errors import IntegrityError, LockbuildError, SignatureError
from lockbuild.fsio import create_new, open_regular, read_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.site.delta import HEAD, MAX_HEAD, full_name, is_delta, parse_head
from lockbuild.site.partlist import PARTS_SUFFIX, join, read_part_list
from lockbuild.site.storage import Store
from lockbuild.site.storemodel import check_name, parse_build_ref
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.source import TIP_AGAIN, BundleFile, SizeCheck, Source, Stream, signature_path

if TYPE_CHECKING:
    from lockbuild.image.imagefile import ImageFile


def _blocks(path: Path, limits: Limits) -> bytes:
    try:
        return read_regular(path, what="signature file", max_size=limits.max_signature_file, error=SignatureError)
    except FileNotFoundError:
        raise SignatureError(
            f"no signature file {path}; expected the bundle's .minisig beside it.",
            tip="Copy the .minisig that was published with the bundle next to it.",
        ) from None


class PartsFile:
    """A part list, its parts and the bundle's ``.minisig`` beside them; joined into ``work``."""

    def __init__(self, part_list: Path, work: Path) -> None:
        self.part_list = part_list
        self.work = work
        self.listing = read_part_list(part_list)
        self.label = str(part_list)
        self.file_name: str | None = self.listing.file
        self.expect_ref: str | None = None
        self.where, self.subject = self.label, "the bundle's manifest"
        self.absent_tip, self.damage_tip, self.partial = TIP_AGAIN, TIP, False
        self.joined = work / self.listing.file
        self.signature_file = signature_path(part_list.parent / self.listing.file)
        self._bundle = BundleFile(self.joined, signatures=self.signature_file)

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        return self._bundle.signature_blocks(limits)

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> FileDigests:
        check(self.listing.size, assembles=True)  # the size the list claims, against the signed ones, first
        self._join(limits)
        return self._bundle.file_digests(check, limits)

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        if not self.joined.exists():  # read without a trust decision (inspect): join, bounded by the list
            self._join(limits)
        return self._bundle.manifest_bytes(limits)

    def _join(self, limits: Limits) -> None:
        try:
            out = create_new(self.joined, mode=0o600)
        except FileExistsError:
            raise IntegrityError(f"{self.joined} exists already; refused to join the parts over it.") from None
        with out:
            join(self.part_list, out, listing=self.listing, limits=limits)

    def members(self, limits: Limits = DEFAULT_LIMITS) -> AbstractContextManager[Stream]:
        return self._bundle.members(limits)

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> int | None:
        return self._bundle.check_frames(limits)


class DeltaFile:
    """A delta and (optionally) the store it completes. Without a store, the members it leaves out are
    absent: ``verify`` checks what it carries and says what it leaves to a store."""

    absent_tip = "Import the base the delta was cut against (or the full bundle) first, then this delta."

    def __init__(self, delta: Path, store: Store | None) -> None:
        self.delta = delta
        self.store = store
        self.label = str(delta)
        self.file_name: str | None = full_name(delta)
        self.expect_ref: str | None = None
        self.where, self.subject, self.damage_tip = self.label, "the bundle's manifest", TIP
        self.partial = store is None  # verified alone, it may leave members to a store

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        return _blocks(signature_path(self.delta), limits)

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> None:
        """No frame tables: the members are checked."""
        return

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> None:
        return None  # the signatures name the full bundle; a delta proves its manifest, not a file

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        with self._open(limits) as (_, manifest_bytes):
            return manifest_bytes

    @contextlib.contextmanager
    def _open(self, limits: Limits) -> Iterator[tuple[TarReader, bytes]]:
        try:
            f, _ = open_regular(self.delta, what="delta", max_size=limits.max_bundle, error=IntegrityError)
        except FileNotFoundError:
            raise IntegrityError(f"the delta {self.delta} does not exist.", tip="Check the path.") from None
        with f:
            tar = open_stream(f, limits)
            head = parse_head(_small(tar, HEAD, MAX_HEAD, limits))  # a hint for messages, not trusted
            self.absent_tip = (
                f"Import the base it was cut against ({head.base}) or the full bundle first, then this delta."
            )
            yield tar, _small(tar, MANIFEST, limits.max_manifest, limits)

    @contextlib.contextmanager
    def members(self, limits: Limits = DEFAULT_LIMITS) -> Iterator[Stream]:
        with self._open(limits) as (tar, manifest_bytes):
            manifest = parse_manifest(manifest_bytes, limits)
            yield Stream(manifest_bytes, self._pieces(tar, manifest.members, limits))

    def _pieces(self, tar: TarReader, members: tuple[Member, ...], limits: Limits) -> Iterator[Piece]:
        """In the manifest's order: the delta's next member where it carries this one, else the store's
        blob, else absent. A carried member out of order, repeated or unlisted is never matched, and is
        left for the extraction to refuse."""
        pending = tar.next()
        for m in members:
            if pending is not None and pending.name == m.path:
                check_header(pending, limits)
                yield TarPiece(tar, pending)
                pending = tar.next()
            elif self.store is not None and self.store.blob_size(m.sha256) is not None:
                yield _blob_piece(self.store, m)
            else:
                yield AbsentPiece(m.path, m.size)
        if pending is not None:
            check_header(pending, limits)
            yield TarPiece(tar, pending)


def _opener(store: Store, sha256: str) -> Callable[[], BinaryIO]:
    return lambda: store.open_blob(sha256)


def _blob_piece(store: Store, m: Member) -> FilePiece:
    """A member as the store's blob; the extraction may hard-link it (``link``: the blob as the store's
    opened ``blobs/sha256`` directory and its name) where the destination shares the store's file system."""
    return FilePiece(m.path, m.size, _opener(store, m.sha256), link=store.blob_at(m.sha256))


def _small(tar: TarReader, name: str, limit: int, limits: Limits) -> bytes:
    h = tar.next()
    if h is None or h.name != name:
        raise IntegrityError(
            f"the delta's member is {h.name if h else 'missing'!r}; expected {name}.",
            tip="Copy the delta again, or import the full bundle.",
        )
    check_header(h, limits)
    if h.size > limit:
        raise IntegrityError(f"the delta's {name} is {h.size} bytes; expected at most {limit}.")
    buf = io.BytesIO()
    copy_member(tar, h, buf, Progress.quiet())
    return buf.getvalue()


class StoreBuild:
    """``ENGINE/VERSION-VARIANT`` in a store."""

    damage_tip = (
        "Run `lockbuild store verify --store DIR --remove-damaged`, then import or pull the build again "
        "(only what is missing moves)."
    )

    def __init__(self, store: Store, ref: str) -> None:
        self.store = store
        self.ref = ref
        self.label = f"{ref} in the store {store.root}"
        self.file_name: str | None = None
        self.expect_ref: str | None = ref
        self.where, self.subject = self.label, "the bundle's manifest"
        self.absent_tip, self.partial = TIP_AGAIN, False
        self._files: tuple[bytes, bytes] | None = None

    def _build(self) -> tuple[bytes, bytes]:
        if self._files is None:
            self._files = self.store.build_files(self.ref)
        return self._files

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        return self._build()[1]

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> None:
        """No frame tables: the members are checked."""
        return

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> None:
        return None

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        return self._build()[0]

    @contextlib.contextmanager
    def members(self, limits: Limits = DEFAULT_LIMITS) -> Iterator[Stream]:
        manifest = parse_manifest(self._build()[0], limits)
        yield Stream(None, iter([_blob_piece(self.store, m) for m in manifest.members]))


def _image(path: Path) -> ImageFile | None:
    """The one test for an image: a regular file that starts as a squashfs image does (its magic, not its
    name), as ``lockbuild image`` writes it."""
    from lockbuild.image.imagefile import ImageFile
    from lockbuild.image.record import is_image

    return ImageFile(path) if is_image(path) else None


def signed_file(path: Path) -> BundleFile | ImageFile:
    """What ``sign`` signs at ``path``: an image (``FILE.sqfs`` with its record beside it) or a bundle file."""
    return _image(path) or BundleFile(path)


@overload
def named_source(
    arg: str | Path, *, store: Path | None = None, work: Path | None = None, images: Literal[False] = False
) -> AbstractContextManager[Source]: ...


@overload
def named_source(
    arg: str | Path, *, store: Path | None = None, work: Path | None = None, images: Literal[True]
) -> AbstractContextManager[Source | ImageFile]: ...


def named_source(
    arg: str | Path, *, store: Path | None = None, work: Path | None = None, images: bool = False
) -> AbstractContextManager[Source | ImageFile]:
    """The one way every command names a bundle: ``ENGINE/VERSION-VARIANT`` with ``--store``, a part
    list (``NAME.lbz.parts.toml``), a delta (``NAME.delta.lbz``, completed by ``--store`` when given),
    or a ``.lbz``; with ``images`` (the commands that take one: verify, sign) and no ``--store``, a
    squashfs image from ``lockbuild image`` too (its magic, not its name), as an ``ImageFile``.
    ``work``: where a part list is joined (default: a private directory in TMPDIR, removed afterwards,
    whatever happens)."""
    return _named(arg, store, work, images)


@contextlib.contextmanager
def _named(arg: str | Path, store: Path | None, work: Path | None, images: bool) -> Iterator[Source | ImageFile]:
    text = str(arg)
    path = Path(text)
    if store is not None and not path.exists() and _is_ref(text):
        with Store(store) as s:
            yield StoreBuild(s, text)
        return
    image = _image(path) if images and store is None else None
    if image is not None:
        yield image
        return
    if not path.exists():
        hint = "" if store is not None else ", and no --store to look ENGINE/VERSION-VARIANT up in"
        raise LockbuildError(
            f"no bundle {text}: no such file{hint}.",
            tip="Give a .lbz, a NAME.lbz.parts.toml, a NAME.delta.lbz, or ENGINE/VERSION-VARIANT with --store DIR.",
        )
    if path.name.endswith(PARTS_SUFFIX):
        with _work(work) as w:
            yield PartsFile(path, w)
        return
    if is_delta(path):
        if store is None:
            yield DeltaFile(path, None)
            return
        with Store(store) as s:
            yield DeltaFile(path, s)
        return
    yield BundleFile(path)


def report_place(source: Source) -> Path | None:
    """Where the vulnerability report of a named source lies: beside a ``.lbz``, or kept with a store's
    build by ``import``; None for a source that carries none (a part list, a delta)."""
    from lockbuild.vulns.cdx import SUFFIX

    if isinstance(source, BundleFile):
        return source.path.with_name(source.path.name + SUFFIX)
    if isinstance(source, StoreBuild):
        return source.store.report_path(source.ref)
    return None


@dataclass(frozen=True)
class Choosing:
    """An argument that names candidates rather than one bundle: ``ENGINE/VERSION`` or
    ``ENGINE`` with ``--store``, or a folder of bundles (``DIR/``). ``lockbuild.choice.choose`` opens
    each through the trust decision and chooses."""

    engine: str | None
    version: str | None
    store: Path | None = None
    folder: Path | None = None


def choosing_form(arg: str | Path, *, store: Path | None = None) -> Choosing | None:
    """The choosing forms, beside :func:`named_source` (which names exactly one bundle): a directory is a
    folder of bundles; with ``--store``, ``ENGINE`` or ``ENGINE/VERSION`` where the store holds no build of
    exactly that name (``ENGINE/VERSION-VARIANT`` still means that one build). None: not a choosing form.
    With ``--store``, a folder is named with its trailing slash (``DIR/``), so an engine's name never
    turns into a directory that happens to be in the working directory."""
    text = str(arg)
    path = Path(text)
    if path.is_dir() and (text.endswith("/") or store is None):  # with --store, `vllm` is the engine, `vllm/` a folder
        return Choosing(None, None, folder=path)
    if store is None or path.is_file() or text.endswith((".lbz", ".toml", "/")):
        return None
    engine, sep, version = text.partition("/")
    try:
        check_name(engine, "engine")
        if sep:
            check_name(version, "version")
    except LockbuildError:
        return None
    if sep and _is_ref(text):
        with Store(store) as s:
            refs = s.refs()
        if text in refs or not any(r.startswith(f"{text}-") for r in refs):
            return None  # an explicit build (exactly that one), or one the store lacks: named_source says so
    return Choosing(engine, version or None, store=store)


class StoreOffers:
    """A store's builds as a :class:`lockbuild.choice.choose.Place`: each ``ENGINE/VERSION-VARIANT`` it
    names, as a :class:`StoreBuild` (judged by the installer's trust decision, never here)."""

    def __init__(self, root: Path, engine: str | None = None, version: str | None = None) -> None:
        self.path, self.engine, self.version = root, engine, version
        self._stack = contextlib.ExitStack()
        self._store: Store | None = None

    def __enter__(self) -> StoreOffers:
        self._store = self._stack.enter_context(Store(self.path))
        return self

    def __exit__(self, *exc: object) -> None:
        self._store = None
        self._stack.close()

    def _open(self) -> Store:
        if self._store is None:
            raise LockbuildError(f"internal: the store {self.path} was asked for builds before it was opened.")
        return self._store

    def engines(self) -> list[str]:
        return sorted({parse_build_ref(r)[0] for r in self._open().refs()})

    def offers(self, engine: str | None) -> tuple[list[Offered], list[str]]:
        store = self._open()
        named = [(ref, parse_build_ref(ref)) for ref in sorted(store.refs())]
        return [Offered(StoreBuild(store, ref), name) for ref, name in named if name[0] == engine], []


class FolderOffers:
    """A folder's ``*.lbz`` files as a :class:`lockbuild.choice.choose.Place`: each a :class:`BundleFile`
    named by its file name only (what it claims counts once its signatures are met); a delta is no
    candidate."""

    def __init__(self, folder: Path) -> None:
        self.path = folder
        self.engine: str | None = None
        self.version: str | None = None

    def __enter__(self) -> FolderOffers:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def engines(self) -> list[str]:
        return []  # a folder names no builds: only its signed bundles say which engine they are

    def offers(self, engine: str | None) -> tuple[list[Offered], list[str]]:
        out, skipped = [], []
        for path in sorted(self.path.glob("*.lbz")):
            if is_delta(path):
                skipped.append(f"{path.name}: a delta, not a whole bundle")
                continue
            out.append(Offered(BundleFile(path), file=path.name))
        return out, skipped


def place_for(request: Choosing) -> StoreOffers | FolderOffers:
    """The place a choosing form names, for :func:`lockbuild.choice.choose.chosen`."""
    if request.folder is not None:
        return FolderOffers(request.folder)
    if request.store is None or request.engine is None:
        raise LockbuildError("internal: a choosing form names neither a folder nor a store's engine.")
    return StoreOffers(request.store, request.engine, request.version)


def _is_ref(text: str) -> bool:
    try:
        parse_build_ref(text)
    except LockbuildError:
        return False
    return True


@contextlib.contextmanager
def _work(work: Path | None) -> Iterator[Path]:
    if work is not None:
        yield work
        return
    with tempfile.TemporaryDirectory(prefix="lockbuild-parts-") as tmp:  # 0700, removed whatever happens
        yield Path(tmp)
