"""A small client for the OCI distribution spec (v1.1): blobs and manifests, with token or basic auth.

Credentials go only where ``registry/auth.py`` lets them; every exchange is bounded in time and size
(``registry/transport.py::Transport``); a busy registry is asked again (``registry/retry.py``); a blob streams
up with flat memory. No third-party exception leaves: failures become ``RegistryError`` with what to do."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlencode

from lockbuild.digest import CHUNK
from lockbuild.registry.auth import parse_auth_realm, realm_refusal
from lockbuild.registry.client import Connection
from lockbuild.registry.reference import OciRef, RegistryCredentials, RegistryError, parse_ref
from lockbuild.registry.retry import RETRY_ENV, with_budget
from lockbuild.registry.transport import DEFAULT_TRANSPORT, MAX_OCI_MANIFEST, TRANSPORT_ERRORS, TransferCut, Transport

__all__ = [
    "CHUNK_FALLBACK",
    "CHUNK_UPLOAD",
    "DEFAULT_TRANSPORT",
    "MAX_OCI_MANIFEST",
    "OCI_MANIFEST",
    "RETRY_ENV",
    "TRANSPORT_ERRORS",
    "OciRef",
    "Registry",
    "RegistryCredentials",
    "RegistryError",
    "TransferCut",
    "Transport",
    "parse_auth_realm",
    "parse_ref",
    "realm_refusal",
    "transport_with",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CHUNK_UPLOAD = 64 << 20  # blobs larger than this are uploaded in chunks (PATCH), smaller in one PUT
CHUNK_FALLBACK = 8 << 20  # the chunks of a blob whose body the registry refused as too large (413)
TOO_LARGE = 413


def transport_with(retry_seconds: str | None) -> Transport:
    """The default bounds, with the retry budget ``LOCKBUILD_REGISTRY_RETRY_SECONDS`` when it is set."""
    return dataclasses.replace(DEFAULT_TRANSPORT, retry=with_budget(DEFAULT_TRANSPORT.retry, retry_seconds))


class Registry(Connection):
    """One repository on one registry: its manifests and blobs, over one connection (``registry/client.py``)."""

    def __init__(
        self,
        ref: OciRef,
        *,
        plain_http: bool = False,
        ca_file: Path | None = None,
        credentials: RegistryCredentials | None = None,
        auth_realms: Sequence[str] = (),
        transport: Transport | None = None,
    ) -> None:
        super().__init__(
            ref,
            plain_http=plain_http,
            ca_file=ca_file,
            credentials=credentials,
            auth_realms=auth_realms,
            transport=transport or DEFAULT_TRANSPORT,
        )

    def __enter__(self) -> Registry:
        return self

    # -- manifests ----------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> bytes:
        """The manifest's bytes, checked to be one bounded JSON object (parsed again by its reader)."""
        what = f"fetching the manifest {self.ref.repo}:{reference}"
        t = self.limits
        with self._exchange(
            "GET",
            f"{self.base}/manifests/{reference}",
            what=what,
            seconds=t.request_seconds,
            headers={"Accept": OCI_MANIFEST},
        ) as r:
            if r.status_code == 404:
                raise self._fail(what, "no such tag (404).", tip="`lockbuild push` it first, or check the tag.")
            self._expect(r, (200,), what)
            raw = self._read(r, t.max_manifest, what)
        if not isinstance(self._json(raw, what, "the manifest", t.max_manifest), dict):
            raise self._fail(what, "the manifest is not a JSON object.", tip="Pull a tag that `lockbuild push` wrote.")
        return raw

    def put_manifest(self, reference: str, data: bytes) -> None:
        what = f"pushing the manifest {self.ref.repo}:{reference}"
        with self._exchange(
            "PUT",
            f"{self.base}/manifests/{reference}",
            what=what,
            seconds=self.limits.blob_deadline(len(data)),
            headers={"Content-Type": OCI_MANIFEST},
            content=data,
        ) as r:
            self._expect(r, (200, 201), what)

    # -- blobs --------------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        what = f"checking the blob {digest}"
        with self._exchange("HEAD", f"{self.base}/blobs/{digest}", what=what, seconds=self.limits.request_seconds) as r:
            if r.status_code == 404:
                return False
            self._expect(r, (200,), what)
            return True

    @contextmanager
    def get_blob(self, digest: str, *, size: int, offset: int = 0) -> Iterator[tuple[Iterator[bytes], int]]:
        """The blob's bytes from ``offset`` (streamed, within the deadline for the ``size - offset`` bytes
        left) and the offset they start at (0 if the registry ignored Range)."""
        what = f"fetching the blob {digest}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        seconds = self.limits.blob_deadline(size - offset)
        with self._exchange("GET", f"{self.base}/blobs/{digest}", what=what, seconds=seconds, headers=headers) as r:
            if r.status_code == 404:
                tip = "Push the build to the registry again; it uploads only what is missing."
                raise self._fail(what, "the registry does not have it (404).", tip=tip)
            self._expect(r, (200, 206), what)
            start = 0
            if r.status_code == 206:
                if not r.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                    raise self._fail(what, f"asked for bytes {offset}- and got {r.headers.get('Content-Range')!r}.")
                start = offset
            yield self._chunks(r, what), start

    def get_small_blob(self, digest: str, limit: int) -> bytes:
        """A blob of at most ``limit`` bytes, held in memory; asked for again whole if its answer breaks off."""
        what = f"fetching the blob {digest}"
        first, cuts = time.monotonic(), 0
        while True:
            try:
                with self.get_blob(digest, size=limit) as (chunks, _):
                    out = bytearray()
                    for chunk in chunks:
                        out += chunk
                        if len(out) > limit:
                            raise self._fail(what, f"the answer is over {limit} bytes; refused.")
                    return bytes(out)
            except TransferCut as exc:
                cuts += 1
                if not self.resume_after_cut(cuts, first):
                    raise exc.plain() from None

    def upload_blob(
        self, digest: str, src: BinaryIO, size: int, *, progress: Callable[[int], None] | None = None
    ) -> None:
        """Upload ``size`` bytes from ``src`` (from where it stands) as ``digest``: one monolithic PUT, or
        PATCH chunks of ``CHUNK_UPLOAD`` for a blob larger than that; where the registry (or a proxy in
        front of it) refuses a body that large (413), the same bytes again in chunks of ``CHUNK_FALLBACK``.
        Each body is streamed from ``src`` (``_Body``); the registry checks the digest as it completes."""
        what = f"uploading the blob {digest}"
        start = _tell(src, what)
        if size <= CHUNK_UPLOAD:
            if self._upload(digest, _Body(src, start, size, what, progress), None, what):
                return
        elif self._upload(digest, _Body(src, start, size, what, progress), CHUNK_UPLOAD, what):
            return
        if not self._upload(digest, _Body(src, start, size, what, progress), CHUNK_FALLBACK, what):
            raise self._fail(
                what,
                f"the registry refused even a {CHUNK_FALLBACK}-byte request body as too large (413).",
                tip="Raise the request body limit of the registry or of the proxy in front of it "
                "(nginx: client_max_body_size), then push again: it uploads only what is missing.",
            )

    def _upload(self, digest: str, body: _Body, chunk: int | None, what: str) -> bool:
        """One upload session: ``body`` whole (``chunk`` None) or in PATCH chunks of ``chunk`` bytes, then
        the PUT that names the digest. False if the registry refused a body as too large (413)."""
        t = self.limits
        with self._exchange(
            "POST", f"{self.base}/blobs/uploads/", what=what, seconds=t.request_seconds, content=b""
        ) as r:
            self._expect(r, (202,), what)
            location = self._join(f"{self.base}/", r.headers.get("Location", ""), what)
        octets = {"Content-Type": "application/octet-stream"}
        last: bytes | _Body = body
        if chunk is not None:
            for part in body.split(chunk):
                end = part.offset - body.offset + part.size
                with self._exchange(
                    "PATCH",
                    location,
                    what=what,
                    seconds=t.blob_deadline(part.size),
                    content=part,
                    headers={
                        **octets,
                        "Content-Length": str(part.size),
                        "Content-Range": f"{end - part.size}-{end - 1}",
                    },
                ) as r:
                    if r.status_code == TOO_LARGE:
                        return False
                    self._expect(r, (202,), what)
                    location = self._join(location, r.headers.get("Location", location), what)
            last = b""
        else:
            octets["Content-Length"] = str(body.size)
        sep = "&" if "?" in location else "?"
        with self._exchange(
            "PUT",
            f"{location}{sep}{urlencode({'digest': digest})}",
            what=what,
            seconds=t.blob_deadline(0 if isinstance(last, bytes) else body.size),
            content=last,
            headers=octets,
        ) as r:
            if r.status_code == TOO_LARGE:
                return False
            self._expect(r, (201,), what)
        return True


@dataclass(frozen=True)
class _Body:
    """``size`` bytes of ``src`` from ``offset``, as a request body of ``CHUNK`` pieces (memory stays flat: httpx keeps
    a streamed request in a reference cycle until the garbage collector runs, so a bytes body per PATCH chunk would
    stay resident; a 900 MB blob held ~900 MB). Iterable again: a request sent anew (after a 401, or to a redirect's
    target) seeks back and sends the same bytes; a source that ends early fails the request instead of sending less."""

    src: BinaryIO
    offset: int
    size: int
    what: str
    progress: Callable[[int], None] | None = None  # told each piece's size as it is sent

    def split(self, chunk: int) -> Iterator[_Body]:
        """The same bytes as bodies of at most ``chunk`` bytes, in order."""
        for at in range(0, self.size, chunk):
            yield dataclasses.replace(self, offset=self.offset + at, size=min(chunk, self.size - at))

    def __iter__(self) -> Iterator[bytes]:
        try:
            self.src.seek(self.offset)
        except OSError as exc:
            raise _source_error(self.what, exc) from None
        left = self.size
        while left:
            piece = _read_source(self.src, min(CHUNK, left), self.what)
            if not piece:
                raise RegistryError(
                    f"{self.what}: the local copy ended {left} bytes early.",
                    tip="Run `lockbuild store verify` on the store.",
                )
            left -= len(piece)
            yield piece
            if self.progress is not None:
                self.progress(len(piece))


def _read_source(src: BinaryIO, n: int, what: str) -> bytes:
    try:
        return src.read(n)
    except OSError as exc:
        raise _source_error(what, exc) from None


def _tell(src: BinaryIO, what: str) -> int:
    try:
        return src.tell()
    except OSError as exc:
        raise _source_error(what, exc) from None


def _source_error(what: str, exc: OSError) -> RegistryError:
    return RegistryError(
        f"{what}: cannot read the local copy: {exc.strerror or exc}.", tip="Run `lockbuild store verify` on the store."
    )
