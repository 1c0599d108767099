"""The offline vulnerability database an audit reads: a directory of OSV JSON records, or the zip
osv.dev publishes for an ecosystem (``PyPI/all.zip``), bounded and strict. Nothing is written: members
are bounded by the bytes actually decompressed, named plainly ``NAME.json``; a directory's records are
opened by descriptor, links refused. Any malformed record is an error (exit 2)."""

from __future__ import annotations

import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from lockbuild.errors import AdvisoryDataError
from lockbuild.fsio import list_dir, open_regular, opened_dir, read_regular
from lockbuild.limits import MiB
from lockbuild.vulns.osv import MAX_RECORD, OsvRecord, read_record

MAX_RECORDS = 500_000  # osv.dev's PyPI/all.zip holds some 20 000
MAX_TOTAL = 4096 * MiB  # all records together, decompressed
MAX_ZIP = 2048 * MiB  # the zip file itself
_TIP = "Carry the database as osv.dev publishes it: PyPI/all.zip, or a directory of its ID.json records."


def _plain_name(name: str, where: str) -> str:
    if not name or "/" in name or "\\" in name or name in (".", "..") or ":" in name or "\x00" in name:
        raise AdvisoryDataError(
            f"{where}: the member {name[:100]!r} is not a plain NAME.json; expected osv.dev's flat zip of records.",
            tip=_TIP,
        )
    return name


def _zip_records(path: Path) -> Iterator[tuple[str, bytes]]:
    f, _ = open_regular(path, what="vulnerability database", max_size=MAX_ZIP, error=AdvisoryDataError)
    with f:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise AdvisoryDataError(f"{path} is not a readable zip ({exc}).", tip=_TIP) from None
        with zf:
            infos = zf.infolist()
            if len(infos) > MAX_RECORDS:
                raise AdvisoryDataError(f"{path} holds {len(infos)} members; expected at most {MAX_RECORDS}.")
            total = 0
            for info in infos:
                name = _plain_name(info.filename, str(path))
                if info.is_dir() or not name.endswith(".json"):
                    raise AdvisoryDataError(f"{path}: the member {name[:100]!r} is not an OSV record (NAME.json).")
                try:
                    with zf.open(info) as member:
                        raw = member.read(MAX_RECORD + 1)  # what is decompressed, whatever the header says
                except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError, zlib.error) as exc:
                    raise AdvisoryDataError(f"{path}: the member {name[:100]!r} cannot be read ({exc}).") from None
                if len(raw) > MAX_RECORD:
                    raise AdvisoryDataError(f"{path}: the member {name!r} is over {MAX_RECORD} bytes decompressed.")
                total += len(raw)
                if total > MAX_TOTAL:
                    raise AdvisoryDataError(f"{path} decompresses to more than {MAX_TOTAL} bytes; refused.")
                yield f"{path}:{name}", raw


def _dir_records(path: Path) -> Iterator[tuple[str, bytes]]:
    with opened_dir(path) as dfd:
        names = [n for n in list_dir(dfd) if n.endswith(".json")]
        if len(names) > MAX_RECORDS:
            raise AdvisoryDataError(f"{path} holds {len(names)} records; expected at most {MAX_RECORDS}.")
        total = 0
        for name in names:
            shown = str(path / name)
            try:
                raw = read_regular(name, dir_fd=dfd, what="OSV record", max_size=MAX_RECORD, error=AdvisoryDataError)
            except FileNotFoundError:
                continue  # removed while listed
            total += len(raw)
            if total > MAX_TOTAL:
                raise AdvisoryDataError(f"{path} holds more than {MAX_TOTAL} bytes of records; refused.")
            yield shown, raw


def load_database(path: Path) -> tuple[OsvRecord, ...]:
    """Every record of the database at ``path`` (a directory or a zip), each read strictly."""
    try:
        st = path.lstat()
    except OSError as exc:
        raise AdvisoryDataError(f"cannot read the vulnerability database {path}: {exc.strerror}.", tip=_TIP) from None
    found = _dir_records(path) if stat.S_ISDIR(st.st_mode) else _zip_records(path)
    records: dict[str, OsvRecord] = {}
    for where, raw in found:
        r = read_record(raw, where=where)
        if r.id in records:
            raise AdvisoryDataError(f"{where}: the record {r.id} appears twice in the database.", tip=_TIP)
        records[r.id] = r
    if not records:
        raise AdvisoryDataError(f"{path} holds no OSV record; expected a database carried in.", tip=_TIP)
    return tuple(records[k] for k in sorted(records))
