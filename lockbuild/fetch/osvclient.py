"""Asking an OSV service about every locked package version, under one short deadline.

``POST /v1/querybatch``, then ``GET /v1/vulns/{id}`` for each id found, through the one JSON client with
its bounds, on a thread beside the downloads. A service that cannot be reached in time gives a
:class:`Lookup` that says so ("not checked"), never an empty answer."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from lockbuild.errors import AdvisoryDataError, LockbuildError, RemoteError
from lockbuild.fetch.http import get_json, make_client, post_json
from lockbuild.settings import Settings
from lockbuild.vulns.osv import ECOSYSTEM, MAX_RECORD, OsvRecord, parse_record

DEADLINE = 8.0  # seconds for the whole look-up: a builder with no route to the service loses no more
BATCH = 1000  # OSV's querybatch takes at most 1000 queries
MAX_PAGES = 20  # rounds of next_page_token
MAX_IDS = 5000  # distinct records one look-up fetches
MAX_BATCH_ANSWER = 32 << 20


@dataclass(frozen=True)
class Lookup:
    """What the service said about ``packages`` at ``queried``: ``checked`` False with ``reason`` when it
    was not asked or did not answer; ``hits`` pairs each package (by index) with the records found."""

    service: str
    queried: dt.datetime
    packages: tuple[tuple[str, str], ...]
    checked: bool
    reason: str
    records: tuple[OsvRecord, ...]
    hits: tuple[tuple[int, str], ...]  # (package index, record id)

    def findings(self) -> list[tuple[OsvRecord, str, str]]:
        """(record, name, version) for each hit of a record that is not withdrawn, by id then name."""
        by_id = {r.id: r for r in self.records}
        out = [(by_id[rid], *self.packages[i]) for i, rid in self.hits if rid in by_id and not by_id[rid].withdrawn]
        return sorted(out, key=lambda t: (t[0].id, t[1], t[2]))


def _results(answer: Any, count: int, where: str) -> list[dict[str, Any]]:
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list) or len(answer["results"]) != count:
        raise RemoteError(f"{where} answered something other than {count} results; expected OSV's querybatch answer.")
    out = []
    for r in answer["results"]:
        if not isinstance(r, dict) or not isinstance(r.get("vulns", []), list):
            raise RemoteError(f"{where} answered a result that is not an object with a list of vulns.")
        out.append(r)
    return out


def _query(client: Any, base: str, packages: Sequence[tuple[str, str]], deadline: float) -> list[tuple[int, str]]:
    """Every (package index, id) the service names, following next_page_token per query."""
    url = f"{base}/v1/querybatch"
    hits: list[tuple[int, str]] = []
    todo: list[tuple[int, str | None]] = [(i, None) for i in range(len(packages))]
    for _ in range(MAX_PAGES):
        if not todo:
            return hits
        later: list[tuple[int, str | None]] = []
        for start in range(0, len(todo), BATCH):
            if time.monotonic() > deadline:
                raise TimeoutError
            chunk = todo[start : start + BATCH]
            queries = []
            for i, token in chunk:
                q: dict[str, Any] = {
                    "package": {"name": packages[i][0], "ecosystem": ECOSYSTEM},
                    "version": packages[i][1],
                }
                if token is not None:
                    q["page_token"] = token
                queries.append(q)
            answer = post_json(client, url, {"queries": queries}, what="the OSV service", limit=MAX_BATCH_ANSWER)
            for (i, _), result in zip(chunk, _results(answer, len(chunk), url), strict=True):
                for v in result.get("vulns", []):
                    if not isinstance(v, dict) or not isinstance(v.get("id"), str):
                        raise RemoteError(f"{url} answered a vuln without an id.")
                    hits.append((i, v["id"]))
                token = result.get("next_page_token")
                if isinstance(token, str) and token:
                    later.append((i, token))
        if len({rid for _, rid in hits}) > MAX_IDS:
            raise RemoteError(f"{url} named more than {MAX_IDS} records; expected fewer for one build.")
        todo = later
    raise RemoteError(f"{url} kept answering next_page_token after {MAX_PAGES} rounds.")


def _lookup(settings: Settings, base: str, packages: tuple[tuple[str, str], ...], deadline: float) -> Lookup:
    queried = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with make_client(connections=4, settings=settings, timeout=max(0.5, deadline - time.monotonic())) as client:
        hits = sorted(set(_query(client, base, packages, deadline)))
        records = []
        for rid in sorted({rid for _, rid in hits}):
            if time.monotonic() > deadline:
                raise TimeoutError
            url = f"{base}/v1/vulns/{quote(rid, safe='')}"
            data, _ = get_json(client, url, what="the OSV service", limit=MAX_RECORD)
            record = parse_record(data, where=f"the OSV record {rid}")
            if record.id != rid:
                raise RemoteError(f"{url} answered the record {record.id!r}; expected {rid!r}.")
            records.append(record)
    return Lookup(base, queried, packages, True, "", tuple(records), tuple(hits))


class PendingLookup:
    """A look-up started on its own thread; :meth:`result` waits for it until the deadline at most."""

    def __init__(
        self, settings: Settings, packages: Sequence[tuple[str, str]], *, deadline: float | None = None
    ) -> None:
        deadline = DEADLINE if deadline is None else deadline
        self.seconds = deadline
        self.packages = tuple(sorted(set(packages)))
        self.service = settings.osv_url or ""
        self.started = dt.datetime.now(dt.UTC).replace(microsecond=0)
        self.deadline = time.monotonic() + deadline
        self._result: Lookup | None = None
        self._thread: threading.Thread | None = None
        if settings.osv_url is None:
            self._result = self._not_checked("LOCKBUILD_OSV_URL is none")
            return
        base = settings.osv_url

        def run() -> None:
            try:
                self._result = _lookup(settings, base, self.packages, self.deadline)
            except TimeoutError:
                self._result = self._not_checked(f"{base} did not answer within {deadline:g} s")
            except (LockbuildError, AdvisoryDataError) as exc:
                self._result = self._not_checked(exc.message)
            except Exception as exc:  # whatever the service does, the build goes on, said plainly
                self._result = self._not_checked(f"{base}: {type(exc).__name__}: {exc}"[:300])

        self._thread = threading.Thread(target=run, name="osv-lookup", daemon=True)
        self._thread.start()

    def _not_checked(self, reason: str) -> Lookup:
        return Lookup(self.service, self.started, self.packages, False, reason, (), ())

    def result(self) -> Lookup:
        if self._thread is not None:
            self._thread.join(max(0.0, self.deadline - time.monotonic()))
        got = self._result
        if got is None:
            return self._not_checked(f"{self.service} did not answer within {self.seconds:g} s")
        return got
