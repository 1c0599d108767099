"""A fake OSV service on 127.0.0.1 (``POST /v1/querybatch``, ``GET /v1/vulns/{id}``), and OSV records
that follow the OSV schema: every record it is given is validated against the schema vendored from
ossf/osv-schema (``tests/data/osv-schema.json``, validation/schema.json) with ``jsonschema`` first.

The service answers a query with the records whose ``affected`` entry lists the version explicitly or
whose ECOSYSTEM range holds it (decided here by plain tuple comparison of dotted numbers, not by
lockbuild's matching), ``page_size`` ids a page, with OSV's ``next_page_token``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jsonschema
from servers import QuietHTTPServer

SCHEMA = json.loads((Path(__file__).parent / "data" / "osv-schema.json").read_text())


def check_schema(record: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(record, SCHEMA)
    return record


def record(
    rid: str,
    name: str,
    *,
    introduced: str = "0",
    fixed: str | None = None,
    last_affected: str | None = None,
    versions: Iterable[str] = (),
    aliases: Iterable[str] = (),
    withdrawn: str | None = None,
    modified: str = "2026-01-02T00:00:00Z",
    severity: str = "HIGH",
) -> dict[str, Any]:
    """A PyPI record shaped as pypa/advisory-database's and GitHub's are."""
    events: list[dict[str, str]] = [{"introduced": introduced}]
    if fixed is not None:
        events.append({"fixed": fixed})
    if last_affected is not None:
        events.append({"last_affected": last_affected})
    r: dict[str, Any] = {
        "schema_version": "1.6.0",
        "id": rid,
        "modified": modified,
        "published": "2026-01-01T00:00:00Z",
        "aliases": list(aliases),
        "summary": f"{name}: a test advisory",
        "details": "Found by the tests.",
        "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": name, "purl": f"pkg:pypi/{name}"},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
                "versions": list(versions),
            }
        ],
        "references": [{"type": "ADVISORY", "url": f"https://example.invalid/{rid}"}],
        "database_specific": {"severity": severity},
    }
    if withdrawn is not None:
        r["withdrawn"] = withdrawn
    return check_schema(r)


def _num(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _hit(rec: dict[str, Any], name: str, version: str) -> bool:
    for a in rec.get("affected", []):
        if a["package"]["name"] != name:
            continue
        if version in a.get("versions", []):
            return True
        for r in a.get("ranges", []):
            ev = {k: v for e in r["events"] for k, v in e.items()}
            lo = ev.get("introduced", "0")
            if _num(version) < _num(lo) and lo != "0":
                continue
            if "fixed" in ev and _num(version) >= _num(ev["fixed"]):
                continue
            if "last_affected" in ev and _num(version) > _num(ev["last_affected"]):
                continue
            return True
    return False


class FakeOSV:
    def __init__(self, *, page_size: int = 100) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.page_size = page_size
        self.queries: list[dict[str, Any]] = []
        self.gets: list[str] = []
        kit = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                if self.path != "/v1/querybatch":
                    return self._send(404, {"message": "not found"})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                kit.queries.append(body)
                results = []
                for q in body["queries"]:
                    ids = sorted(
                        rid for rid, rec in kit.records.items() if _hit(rec, q["package"]["name"], q["version"])
                    )
                    start = int(q.get("page_token", "0"))
                    page = ids[start : start + kit.page_size]
                    res: dict[str, Any] = {"vulns": [{"id": i, "modified": kit.records[i]["modified"]} for i in page]}
                    if start + kit.page_size < len(ids):
                        res["next_page_token"] = str(start + kit.page_size)
                    results.append(res)
                return self._send(200, {"results": results})

            def do_GET(self) -> None:
                rid = self.path.removeprefix("/v1/vulns/")
                kit.gets.append(rid)
                if rid in kit.records:
                    return self._send(200, kit.records[rid])
                return self._send(404, {"message": "not found"})

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, *records: dict[str, Any]) -> None:
        for r in records:
            self.records[r["id"]] = check_schema(r)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
