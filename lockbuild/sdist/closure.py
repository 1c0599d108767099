"""Whether a set of pins is exactly what some requirements need on one target. Pure.

A remembered resolution's pins are used only if they answer the requirements and every pin is reached
from them through the wheels' ``Requires-Dist`` (markers for the target, extras followed): a pin nothing
reaches was added, a requirement no pin satisfies was taken out. The caller gives the checked metadata."""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from email.parser import BytesHeaderParser
from typing import BinaryIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion

from lockbuild import wheelfile
from lockbuild.errors import IntegrityError

MAX_METADATA_BYTES = wheelfile.MAX_METADATA
MAX_DEPENDENCIES = 10_000  # edges walked over the whole closure


def wheel_metadata(f: BinaryIO, filename: str) -> bytes:
    """The ``*.dist-info/METADATA`` of a wheel (read from ``f``, bounded: ``lockbuild.wheelfile``, the one
    reader of a wheel's members); IntegrityError when it has none or cannot be read."""
    return wheelfile.metadata(f, filename, error=IntegrityError, limit=MAX_METADATA_BYTES)


def _requires(raw: bytes, name: str, version: str) -> list[str] | str:
    """The ``Requires-Dist`` of one pin's metadata, or why the metadata is not that pin's."""
    headers = BytesHeaderParser().parse(io.BytesIO(raw))
    got_name, got_version = headers.get("Name", ""), headers.get("Version", "")
    try:
        same = canonicalize_name(str(got_name)) == name and canonicalize_version(str(got_version)) == (
            canonicalize_version(version)
        )
    except InvalidVersion:
        same = False
    if not same:
        return f"the metadata of {name}=={version} names {str(got_name)[:60]!r} {str(got_version)[:40]!r}"
    return [str(v) for v in headers.get_all("Requires-Dist") or []]


def closure_problem(
    requirements: Sequence[str],
    pins: Mapping[str, str],
    metadata: Callable[[str], bytes],
    environment: Mapping[str, str],
) -> str | None:
    """Why ``pins`` (canonical name -> version) are not exactly the closure of ``requirements`` for the
    target whose PEP 508 ``environment`` is given, or None. ``metadata(name)`` gives a pin's METADATA."""
    queue: deque[tuple[Requirement, str]] = deque()
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return f"cannot read the requirement {text[:80]!r}"
        if req.marker is None or req.marker.evaluate({**environment, "extra": ""}):
            queue.append((req, "the requirements"))
    reached: set[str] = set()
    walked: set[tuple[str, str]] = set()
    edges = 0
    while queue:
        req, by = queue.popleft()
        name = canonicalize_name(req.name)
        version = pins.get(name)
        if version is None:
            return f"{name} is required by {by} ({str(req)[:80]}) but not pinned"
        if req.url is None and not req.specifier.contains(version, prereleases=True):
            return f"{name}=={version} does not satisfy {str(req)[:80]} (required by {by})"
        reached.add(name)
        for extra in ("", *sorted(canonicalize_name(e) for e in req.extras)):
            if (name, extra) in walked:
                continue
            walked.add((name, extra))
            deps = _requires(metadata(name), name, version)
            if isinstance(deps, str):
                return deps
            for dep in deps:
                edges += 1
                if edges > MAX_DEPENDENCIES:
                    return f"more than {MAX_DEPENDENCIES} dependencies to follow"
                try:
                    d = Requirement(dep)
                except InvalidRequirement:
                    return f"{name}=={version} has a Requires-Dist lockbuild cannot read ({dep[:80]!r})"
                # A dependency without a marker belongs to the package itself (walked with extra "").
                applies = extra == "" if d.marker is None else d.marker.evaluate({**environment, "extra": extra})
                if applies:
                    queue.append((d, f"{name}=={version}"))
    extra_pins = sorted(set(pins) - reached)
    if extra_pins:
        shown = ", ".join(f"{n}=={pins[n]}" for n in extra_pins[:10])
        return f"it pins {shown}, which nothing in the requirements needs on this target"
    return None
