"""A busy registry, a pull-through mirror and many nodes at once, against the REAL registry (Debian's
docker-registry) on 127.0.0.1, behind a throttling proxy of the tests' own (tests/throttle.py).

- the retry policy alone (registry/retry.py): Retry-After as seconds or a date, its cap, backoff with
  jitter, the budget;
- 429 with Retry-After and 503 are asked again and the pull (and the push) succeeds;
- a registry that refuses forever fails the command on time, with the registry's answer, a TIP, no
  traceback and one JSON object under --json, and leaves the store usable;
- a pull through a pull-through mirror makes the same trust decision as from the origin;
- pulls from many nodes at once all succeed, into their own stores or one shared store (``--wait``).
"""

from __future__ import annotations

import email.utils
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Keys, make_keys
from registrykit import RealRegistry, binary
from sitekit import cli, make_bundle
from throttle import CUT, Refusal, Rule, Throttle

from lockbuild.registry.connection import Clock
from lockbuild.registry.reference import RegistryError
from lockbuild.registry.retry import (
    RETRY_ENV,
    Answer,
    Moment,
    RetryPolicy,
    backoff,
    decide,
    retry_after_seconds,
    with_budget,
)
from lockbuild.site.storage import MARK, MARK_TEXT, Store
from lockbuild.wire.headers import number

needs_registry = pytest.mark.skipif(binary() is None, reason="docker-registry is not installed (scripts/test does)")
ROOT = REPO_ROOT
POLICY = RetryPolicy()
BUSY = {"Retry-After": "1"}


# -- the policy, pure ---------------------------------------------------------------------------------


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    now = 1_800_000_000.0
    assert retry_after_seconds("7", now) == 7.0
    assert retry_after_seconds(email.utils.formatdate(now + 12, usegmt=True), now) == pytest.approx(12, abs=1)
    assert retry_after_seconds(email.utils.formatdate(now - 100, usegmt=True), now) == 0.0
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None


def test_retry_after_is_ascii_digits_or_an_http_date_and_anything_else_is_absent() -> None:
    now = 1_800_000_000.0
    for odd in ("²", "٣", "1²", "３", "-1", "1.5", "", " ", "7 s", "0x10", "Ⅻ"):
        assert retry_after_seconds(odd, now) is None, odd  # never an internal error, never read as a number
        assert decide(Answer(429, odd), 2, Moment(0.0, now), jitter=0.0).wait == backoff(2, POLICY, 0.0)
    assert retry_after_seconds(" 7 ", now) == 7.0 and retry_after_seconds("0012", now) == 12.0
    assert number("١٢") is None and number("²") is None and number("12") == 12 and number("1" * 19) is None


def test_the_wait_is_never_below_the_backoff_whatever_retry_after_says() -> None:
    at = Moment(0.0, 1_800_000_000.0)
    long = RetryPolicy(retry_seconds=1000)
    past = email.utils.formatdate(at.wall - 100, usegmt=True)
    for attempt in range(1, 9):
        for jitter in (0.0, 0.5, 0.99):
            floor = backoff(attempt, long, jitter)
            assert floor >= long.base_seconds / 2
            for said in ("0", "00", past):  # "ask again now", as seconds or as a date already past
                assert decide(Answer(429, said), attempt, at, long, jitter).wait == floor
            assert decide(Answer(503, "30"), attempt, at, long, jitter).wait == max(floor, 30.0)
            assert decide(Answer(503, "86400"), attempt, at, long, jitter).wait == max(floor, long.max_retry_after)


def test_every_header_number_is_read_by_the_one_parser() -> None:
    """``str.isdigit`` is true of Unicode digits (``'²'``, ``'٣'``): the clients read a header's number
    through ``lockbuild.wire.headers``; the few other ``isdigit`` calls in the library read ASCII only."""
    import ast

    import lockbuild

    package = Path(lockbuild.__file__).parent
    ascii_only = {
        "bundle/tar.py": "bytes: isdigit is ASCII only",
        "trust/statement.py": "isascii() first",
        "builder/selfwheel.py": "decoded as ASCII, errors replaced",
        "gpu/fit.py": "isascii() first",
    }
    found = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("isdigit", "isdecimal", "isnumeric")
    }
    assert found <= set(ascii_only), f"read a number from outside with lockbuild.wire.headers.number: {found}"
    readers = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if "retry-after" in path.read_text().lower() and "def retry_after_seconds" in path.read_text()
    }
    assert readers == {"wire/headers.py"}


def test_only_busy_answers_are_asked_again() -> None:
    at = Moment(0.0, 0.0)
    for status in (429, 502, 503, 504):
        assert decide(Answer(status), 1, at).again
    for status in (400, 401, 403, 404, 500, 501):
        assert not decide(Answer(status), 1, at).again


def test_retry_after_is_obeyed_and_capped_at_60_s() -> None:
    at = Moment(0.0, 1_800_000_000.0)
    assert decide(Answer(429, "3"), 1, at).wait == 3.0
    long = RetryPolicy(retry_seconds=1000)
    assert decide(Answer(429, "86400"), 1, at, long).wait == 60.0
    date = email.utils.formatdate(at.wall + 30, usegmt=True)
    assert decide(Answer(503, date), 1, at, long).wait == pytest.approx(30, abs=1)


def test_without_retry_after_the_wait_doubles_up_to_a_cap_with_jitter() -> None:
    waits = [backoff(n, POLICY, 0.0) for n in range(1, 8)]
    assert waits[:4] == [0.25, 0.5, 1.0, 2.0] and max(waits) == POLICY.max_backoff / 2
    assert backoff(3, POLICY, 0.0) < backoff(3, POLICY, 0.99) <= 2.0  # half of the wait is random
    assert {round(decide(Answer(503), 3, Moment(0, 0), jitter=j).wait or 0, 3) for j in (0.1, 0.5, 0.9)} == {
        1.1,
        1.5,
        1.9,
    }


def test_a_request_gives_up_once_its_budget_is_spent() -> None:
    p = RetryPolicy(retry_seconds=10)
    assert decide(Answer(429), 5, Moment(9.0, 0), p, jitter=0.0).again is False  # 9 + 2 > 10
    late = decide(Answer(429, "30"), 1, Moment(0.0, 0), p)  # asked to wait past the budget: not begun
    assert late.wait is None and "Retry-After" in late.why
    assert decide(Answer(503), 1, Moment(0, 0), RetryPolicy(retry_seconds=0)).again is False


def test_the_budget_comes_from_the_environment_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    assert with_budget(POLICY, None) == POLICY and with_budget(POLICY, "0").retry_seconds == 0
    assert with_budget(POLICY, "300").retry_seconds == 300
    for bad in ("soon", "-1", "86400", "nan"):
        with pytest.raises(RegistryError, match="is not a number of seconds from 0 to 3600"):
            with_budget(POLICY, bad)
    p = _lockbuild("pull", "oci://127.0.0.1:9/site/x:1", "--store", tmp_path / "s", "--json", env={RETRY_ENV: "soon"})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert RETRY_ENV in json.loads(p.stdout)["error"]["message"]


def test_a_pause_ends_at_once_when_the_command_is_stopped() -> None:
    clock = Clock()
    threading.Timer(0.2, clock.stop, args=("another blob failed",)).start()
    t0 = time.monotonic()
    assert clock.pause(30) is False
    assert time.monotonic() - t0 < 5


# -- against the real registry ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    if binary() is None:
        pytest.skip("docker-registry is not installed")
    r = RealRegistry(tmp_path_factory.mktemp("retry-registry"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("retry-keys"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> Path:
    return make_bundle(tmp_path_factory.mktemp("retry-bundle"), [signer.secret], version="1.0")


@pytest.fixture(scope="module")
def pushed(reg: RealRegistry, bundle: Path, signer: Keys) -> str:
    r = cli("push", bundle, reg.ref("site/busy", "1.0-cpu"), "--trust", signer.trust)
    assert r.exit_code == 0, r.output
    return "site/busy"


@pytest.fixture
def throttle(reg: RealRegistry) -> Iterator[list[Throttle]]:
    made: list[Throttle] = []
    yield made
    for t in made:
        t.close()


def _proxy(made: list[Throttle], reg: RealRegistry, rule: Rule) -> Throttle:
    t = Throttle(reg.host, rule)
    made.append(t)
    return t


def _blob_get(method: str, path: str) -> bool:
    return method == "GET" and "/blobs/sha256:" in path


def _lockbuild(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockbuild", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


@needs_registry
def test_429_with_retry_after_and_503_are_asked_again_and_the_pull_succeeds(
    tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys, throttle: list[Throttle]
) -> None:
    def rule(method: str, path: str, n: int) -> Refusal | None:
        if "/manifests/" in path and n == 0:
            return 503, {}
        if _blob_get(method, path) and n < 2:
            return (429, BUSY) if n == 0 else (503, {})
        return None

    t = _proxy(throttle, reg, rule)
    store = tmp_path / "store"
    r = cli("pull", t.ref(pushed, "1.0-cpu"), "--store", store, "--trust", signer.trust, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["fetched"] == 5 and out["retries"] == len(t.refused) == 1 + 2 * 6  # manifest, config + 5 members
    assert {s for _, _, s in t.refused} == {429, 503}
    assert cli("store", "verify", "--store", store).exit_code == 0


@needs_registry
def test_push_asks_a_busy_registry_again(
    tmp_path: Path, reg: RealRegistry, bundle: Path, signer: Keys, throttle: list[Throttle]
) -> None:
    def rule(method: str, path: str, n: int) -> Refusal | None:
        if n == 0 and (method in ("HEAD", "POST") or "/manifests/" in path or "/uploads/" in path):
            return (429, BUSY) if method == "POST" else (503, {})
        return None

    t = _proxy(throttle, reg, rule)
    r = cli("push", bundle, t.ref("site/pushed-busy", "1.0-cpu"), "--trust", signer.trust, "--json")
    assert r.exit_code == 0, r.output
    methods = {m for m, _, _ in t.refused}
    assert {"HEAD", "POST", "PUT"} <= methods and json.loads(r.stdout)["retries"] == len(t.refused)
    got = cli("pull", reg.ref("site/pushed-busy", "1.0-cpu"), "--store", tmp_path / "s", "--trust", signer.trust)
    assert got.exit_code == 0, got.output


@needs_registry
def test_a_blob_whose_answer_breaks_off_is_asked_for_the_rest_from_the_byte_received(
    tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys, throttle: list[Throttle]
) -> None:
    t = _proxy(throttle, reg, lambda m, p, n: (CUT, {}) if _blob_get(m, p) and n == 0 else None)
    store = tmp_path / "store"
    r = cli("pull", t.ref(pushed, "1.0-cpu"), "--store", store, "--trust", signer.trust, "--json")
    assert r.exit_code == 0, r.output
    gets = [(p, rng) for m, p, rng in t.forwarded if _blob_get(m, p)]
    resumed = [rng for _, rng in gets if rng]
    # config + 5 members, each cut once: the members resumed at the byte received (half the blob), the
    # config (the signed manifest, held in memory) asked for again whole
    assert len(gets) == 2 * 6 and len(resumed) == 5
    for path, rng in gets:
        if rng:
            start = int(rng.removeprefix("bytes=").rstrip("-"))
            size = (store / "blobs" / "sha256" / path.rsplit(":", 1)[1]).stat().st_size
            assert start == size // 2, (rng, size)
    assert json.loads(r.stdout)["retries"] == 6
    assert cli("store", "verify", "--store", store).exit_code == 0


def _refuse_forever(only_blobs: bool) -> Rule:
    def rule(method: str, path: str, n: int) -> Refusal | None:
        if only_blobs and not _blob_get(method, path):
            return None
        return 429, {"Retry-After": "1"} if n % 2 else {}

    return rule


@needs_registry
@pytest.mark.parametrize("only_blobs", [True, False], ids=["every-blob-get", "every-request"])
def test_a_registry_that_throttles_forever_fails_the_pull_on_time_and_the_store_stays_usable(
    only_blobs: bool, tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys, throttle: list[Throttle]
) -> None:
    t = _proxy(throttle, reg, _refuse_forever(only_blobs))
    store = tmp_path / "store"
    budget = {RETRY_ENV: "3"}
    t0 = time.monotonic()
    p = _lockbuild("pull", t.ref(pushed, "1.0-cpu"), "--store", store, "--trust", signer.trust, "--json", env=budget)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    assert took < 120, took  # 3 s of asking again, plus the start of a process on a busy machine
    # it asked again more than once, and stopped at the 3 s it was given (backoff 0.25-0.5 s, 0.5-1 s, 1-2 s,
    # 2-4 s, and Retry-After: 1 on every other answer); the default 90 s would make it dozens of attempts
    assert 3 <= len(t.refused) <= 8, t.refused
    doc = json.loads(p.stdout)  # one JSON object, nothing else
    message = doc["error"]["message"]
    assert "429 Too Many Requests" in message and "too many requests" in message and t.host in message
    assert "LOCKBUILD_REGISTRY_RETRY_SECONDS" in doc["error"]["tip"]
    assert "Traceback" not in p.stderr + p.stdout
    human = _lockbuild("pull", t.ref(pushed, "1.0-cpu"), "--store", store, "--trust", signer.trust, env=budget)
    assert human.returncode == 1 and "TIP" in human.stderr + human.stdout and "Traceback" not in human.stderr
    # the store is usable: no lock held, nothing half-adopted; a pull from the good registry works
    # nothing was adopted: the store the failed pull made is gone again, or holds no blob
    assert not (store / "blobs" / "sha256").exists() or not list((store / "blobs" / "sha256").iterdir())
    good = cli("pull", reg.ref(pushed, "1.0-cpu"), "--store", store, "--trust", signer.trust, "--json")
    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["fetched"] == 5
    assert cli("store", "verify", "--store", store).exit_code == 0


@needs_registry
def test_a_retry_after_past_the_budget_is_not_waited_for(
    tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys, throttle: list[Throttle]
) -> None:
    t = _proxy(throttle, reg, lambda m, p, n: (429, {"Retry-After": "3600"}) if _blob_get(m, p) else None)
    t0 = time.monotonic()
    p = _lockbuild(
        "pull",
        t.ref(pushed, "1.0-cpu"),
        "--store",
        tmp_path / "s",
        "--trust",
        signer.trust,
        "--json",
        env={RETRY_ENV: "20"},
    )
    assert p.returncode == 1 and time.monotonic() - t0 < 15
    assert "asked to wait 3600 s" in json.loads(p.stdout)["error"]["message"]


@needs_registry
@pytest.mark.parametrize(
    "said",
    ["0", "²", "٣".encode().decode("latin-1")],  # the last one sent as its UTF-8 bytes
    ids=["zero", "superscript-two", "arabic-indic-three"],
)
def test_a_retry_after_of_zero_or_not_ascii_waits_the_backoff_and_fails_cleanly(
    said: str, tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys, throttle: list[Throttle]
) -> None:
    """``Retry-After: 0`` once made about 92 requests in 4 s; ``Retry-After: ²`` an internal error."""
    t = _proxy(throttle, reg, lambda m, p, n: (429, {"Retry-After": said}) if _blob_get(m, p) else None)
    p = _lockbuild(
        "pull",
        t.ref(pushed, "1.0-cpu"),
        "--store",
        tmp_path / "s",
        "--trust",
        signer.trust,
        "--json",
        env={RETRY_ENV: "3"},
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr + p.stdout, p.stdout + p.stderr
    assert 3 <= len(t.refused) <= 8, len(t.refused)  # the backoff's pace: 0.25-0.5 s, 0.5-1 s, 1-2 s, 2-4 s
    message = json.loads(p.stdout)["error"]["message"]
    assert "429 Too Many Requests" in message and "kept refusing" in message, message


# -- a pull-through mirror ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mirror(reg: RealRegistry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    m = RealRegistry(tmp_path_factory.mktemp("mirror"), upstream=f"http://{reg.host}")
    yield m
    m.close()


@needs_registry
def test_a_pull_through_mirror_gives_the_same_build_and_the_same_trust_decision(
    tmp_path: Path, reg: RealRegistry, mirror: RealRegistry, pushed: str, signer: Keys
) -> None:
    via = cli("pull", mirror.ref(pushed, "1.0-cpu"), "--store", tmp_path / "via", "--trust", signer.trust, "--json")
    assert via.exit_code == 0, via.output
    direct = cli("pull", reg.ref(pushed, "1.0-cpu"), "--store", tmp_path / "direct", "--trust", signer.trust, "--json")
    assert direct.exit_code == 0, direct.output
    for sub in ("blobs/sha256", "builds/toyengine/1.0-cpu"):
        assert {p.name: p.read_bytes() for p in (tmp_path / "via" / sub).iterdir()} == {
            p.name: p.read_bytes() for p in (tmp_path / "direct" / sub).iterdir()
        }
    assert json.loads(via.stdout)["signers"] == json.loads(direct.stdout)["signers"]
    # an untrusted key is refused through the mirror exactly as from the origin, before any blob
    stranger = make_keys(tmp_path / "stranger")
    mirror.mark()
    results = [
        cli("pull", where.ref(pushed, "1.0-cpu"), "--store", tmp_path / f"no-{i}", "--trust", stranger.trust, "--json")
        for i, where in enumerate((reg, mirror))
    ]
    assert [r.exit_code for r in results] == [3, 3]
    errors = [json.loads(r.stdout)["error"] for r in results]
    assert errors[0]["type"] == errors[1]["type"] and "signature policy not met" in errors[1]["message"]
    assert mirror.blob_gets() == []


# -- many nodes at once -----------------------------------------------------------------------------------


@needs_registry
def test_many_nodes_pull_at_once_into_their_own_stores_and_one_shared_store(
    tmp_path: Path, reg: RealRegistry, pushed: str, signer: Keys
) -> None:
    target = reg.ref(pushed, "1.0-cpu")
    stores = [tmp_path / f"node-{i}" for i in range(6)] + [tmp_path / "shared"] * 4  # all created at once
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockbuild",
                "pull",
                target,
                "--store",
                str(s),
                "--trust",
                str(signer.trust),
                "--wait",
                "60",
                "--json",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in stores
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(stores), outs
    fetched = [json.loads(o)["fetched"] for o, _ in outs]
    assert fetched[:6] == [5] * 6
    assert sorted(fetched[6:]) == [0, 0, 0, 5]  # the shared store: one fetched, the others found it there
    for s in set(stores):
        assert cli("store", "verify", "--store", s).exit_code == 0


def test_a_store_another_node_is_creating_at_this_moment_is_opened_once_its_mark_is_whole(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    (root / MARK).write_bytes(MARK_TEXT[:5])  # another node's create, halfway through writing the mark
    threading.Timer(0.3, (root / MARK).write_bytes, args=(MARK_TEXT,)).start()
    with Store(root, create=True) as s:
        assert s.refs() == []
    (root / MARK).write_bytes(b"something else\n")  # a mark that is not becoming ours is still refused
    with pytest.raises(Exception, match="not a format-1 lockbuild store mark"):
        Store(root, create=True)


@needs_registry
def test_a_failed_pull_leaves_a_store_that_another_node_created_meanwhile(
    tmp_path: Path, reg: RealRegistry, pushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    opened = Store.__init__

    def another_node_first(self: Store, root: Path, **kw: object) -> None:
        if root == shared and not shared.exists():  # the other node creates it just after this pull looked
            other = Store.__new__(Store)
            opened(other, root, create=True)
            other.close()
        opened(self, root, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "__init__", another_node_first)
    stranger = make_keys(tmp_path / "stranger")
    r = cli("pull", reg.ref(pushed, "1.0-cpu"), "--store", shared, "--trust", stranger.trust)
    assert r.exit_code == 3, r.output  # this node's pull fails ...
    assert (shared / MARK).read_bytes() == MARK_TEXT  # ... and leaves the other node's store alone
    monkeypatch.undo()
    lone = tmp_path / "lone"
    assert cli("pull", reg.ref(pushed, "1.0-cpu"), "--store", lone, "--trust", stranger.trust).exit_code == 3
    assert not lone.exists()  # a store the failed pull made itself is still forgotten
