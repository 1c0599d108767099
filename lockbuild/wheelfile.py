"""Reading a wheel's members: the one place that opens a wheel as a zip and reads what is inside.

However a wheel is damaged (no zip, a lying central directory, a stream that does not decode, a bad CRC,
an encrypted entry, a truncated file), reading it raises the caller's error naming the wheel, never zlib's
or zipfile's own exception: ``READ_ERRORS`` is every way the standard library fails."""

from __future__ import annotations

import contextlib
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from lockbuild.errors import LockbuildError

# What zipfile and the decompressors under it raise on a damaged archive: BadZipFile (and a bad CRC),
# zlib.error (deflate), OSError (bzip2: "Invalid data stream"; a read of the file), lzma.LZMAError,
# EOFError (a stream cut short), RuntimeError (an encrypted entry) and NotImplementedError (an unknown
# compression), ValueError and struct.error (fields that do not parse).
READ_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    OSError,
    EOFError,
    RuntimeError,
    ValueError,
    struct.error,
)
MAX_METADATA = 16 << 20  # a METADATA file with its long description (PyPI's largest are a few MB)


def why(exc: BaseException) -> str:
    """A failure to read, in words for a message (the exception's kind and, bounded, its text)."""
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def opened(
    f: BinaryIO, filename: str, *, error: type[LockbuildError], tip: str | None = None
) -> Iterator[zipfile.ZipFile]:
    """The wheel ``f`` as a zip; every read failure inside the block (opening it, listing it, reading a
    member) becomes ``error`` naming ``filename``. Errors of lockbuild's own pass through."""
    try:
        with zipfile.ZipFile(f) as z:
            yield z
    except LockbuildError:
        raise
    except READ_ERRORS as exc:
        raise error(f"cannot read the wheel {filename} ({why(exc)}); expected a readable wheel.", tip=tip) from None


def metadata(
    f: BinaryIO, filename: str, *, error: type[LockbuildError], tip: str | None = None, limit: int = MAX_METADATA
) -> bytes:
    """The wheel's one top-level ``*.dist-info/METADATA``, at most ``limit`` bytes (counted as decoded, the
    zip's own sizes may lie); ``error`` when it has none, several, a larger one, or cannot be read."""
    with opened(f, filename, error=error, tip=tip) as z:
        infos = [i for i in z.infolist() if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")]
        if len(infos) != 1:
            raise error(
                f"the wheel {filename} has {len(infos)} top-level .dist-info/METADATA files; expected exactly one.",
                tip=tip,
            )
        if infos[0].file_size > limit:
            raise error(
                f"the METADATA of the wheel {filename} is {infos[0].file_size} bytes; at most {limit}.", tip=tip
            )
        with z.open(infos[0]) as m:
            data = m.read(limit + 1)
        if len(data) > limit:
            raise error(f"the METADATA of the wheel {filename} is over {limit} bytes; expected a small file.", tip=tip)
        return data
