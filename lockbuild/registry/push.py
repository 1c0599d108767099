"""Push a build that the one trust decision accepted to an OCI registry: what it lacks, checked, in parallel.

The registry is asked which member blobs it has; the members it lacks go through the one extraction into
a private staging directory and are uploaded ``jobs`` at a time as each is checked (the first failure stops
the rest); the config, then the OCI manifest carrying the blocks that counted, last."""

from __future__ import annotations

import hashlib
import io
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from lockbuild.bundle.manifest import Member
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import open_regular
from lockbuild.progress import Progress
from lockbuild.registry import modelpack
from lockbuild.registry.api import Registry
from lockbuild.registry.artifact import BUNDLE, CONFIG_TYPE, MEMBER_TYPE, SIGNATURES, Moved, distinct, oci_manifest
from lockbuild.trust import load_trust_store, open_source, trust_dir
from lockbuild.trust.source import Source

DEFAULT_JOBS = 4
T = TypeVar("T")


def push(
    source: Source,
    registry: Registry,
    *,
    trust: Path | None,
    threshold: int | None = None,
    progress: Progress | None = None,
    jobs: int = DEFAULT_JOBS,
) -> Moved:
    """The one trust decision (as ``pull`` makes it, and ``install``): nothing unchecked is uploaded; then
    the members the registry lacks (each checked against the signed manifest), the config and the OCI
    manifest. ``trust``: the trust directory (None: the default)."""
    progress = progress or Progress.quiet()
    trusted = open_source(source, load_trust_store(trust_dir(trust)), threshold=threshold)
    m = trusted.manifest
    members = distinct(m.members)
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="push") as pool:
        have = _all(pool, registry, [partial(registry.has_blob, f"sha256:{x.sha256}") for x in members])
        lacking = {x.sha256 for x, there in zip(members, have, strict=True) if not there}
        sent = _Sent()
        uploads: list[Future[None]] = []
        with tempfile.TemporaryDirectory(prefix="lockbuild-push-") as scratch:
            staging = Path(scratch) / "members"
            taken: set[str] = set()

            def want(x: Member) -> bool:
                if x.sha256 in lacking and x.sha256 not in taken:
                    taken.add(x.sha256)
                    return True
                return False

            def checked(x: Member) -> None:  # held to the signed manifest: it may go up now
                failed = next((f for f in uploads if f.done() and f.exception() is not None), None)
                if failed is not None:
                    failed.result()  # an upload failed: the check of the rest ends here
                uploads.append(pool.submit(_stopping, registry, partial(_upload, registry, staging, x, sent)))

            try:
                done = trusted.extract(staging, progress=progress, want=want, action="checking", checked=checked)
                sent.show(progress, "uploading", done.written)
                for f in uploads:
                    f.result()  # the first failure, whichever blob it was
            except LockbuildError as exc:
                registry.stop(exc)  # the uploads still running end at their next write
                raise
            finally:
                for f in uploads:
                    f.cancel()
    moved = done.written
    config = "sha256:" + hashlib.sha256(trusted.manifest_bytes).hexdigest()
    if not registry.has_blob(config):
        registry.upload_blob(config, io.BytesIO(trusted.manifest_bytes), len(trusted.manifest_bytes))
    if m.model is not None:  # a model: the ModelPack layout, its configuration blob beside the members
        notes = {SIGNATURES: trusted.counted_signatures().decode("utf-8"), BUNDLE: m.bundle_name}
        document, model_config = modelpack.model_artifact(
            m, trusted.manifest_bytes, notes, manifest_type=CONFIG_TYPE, member_type=MEMBER_TYPE
        )
        digest = "sha256:" + hashlib.sha256(model_config).hexdigest()
        if not registry.has_blob(digest):
            registry.upload_blob(digest, io.BytesIO(model_config), len(model_config))
    else:
        document = oci_manifest(trusted.manifest_bytes, m.members, trusted.counted_signatures(), m.bundle_name)
    registry.put_manifest(registry.ref.tag, document)
    progress.finish()
    return Moved(trusted.ref, len(members), len(moved), sum(x.size for x in moved), trusted.signer_ids)


def _upload(registry: Registry, staging: Path, x: Member, sent: _Sent) -> None:
    f, _ = open_regular(staging / x.path, what="staged member", max_size=x.size, error=IntegrityError)
    with f:
        registry.upload_blob(f"sha256:{x.sha256}", f, x.size, progress=sent.advance)
    sent.file_done()


class _Sent:
    """What the uploads have sent: counted while the check still holds the progress line, shown on it after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._bytes = self._files = 0

    def advance(self, n: int) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.advance(n)
            else:
                self._bytes += n

    def file_done(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.file_done()
            else:
                self._files += 1

    def show(self, progress: Progress, action: str, members: tuple[Member, ...]) -> None:
        """From now on on ``progress``, as ``action`` over ``members``, with what was sent so far."""
        with self._lock:
            progress.start(action, total_bytes=sum(x.size for x in members), files=len(members))
            progress.advance(self._bytes)
            for _ in range(self._files):
                progress.file_done()
            self._progress = progress


def _all(pool: ThreadPoolExecutor, registry: Registry, calls: list[Callable[[], T]]) -> list[T]:
    """Every call's result, ``pool``'s workers at a time, in order; the first failure stops the other
    transfers (``Registry.stop``) and is raised, whichever call it came from."""
    futures: list[Future[T]] = [pool.submit(_stopping, registry, call) for call in calls]
    try:
        return [f.result() for f in futures]
    finally:
        for f in futures:
            f.cancel()


def _stopping(registry: Registry, call: Callable[[], T]) -> T:
    try:
        return call()
    except LockbuildError as exc:
        first = registry.stop(exc)
        if first is exc:
            raise
        raise type(first)(first.message, tip=first.tip) from None
