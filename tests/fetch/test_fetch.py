"""The fetcher and its cache against local servers: resume, restart, refusal, retries, bounds, cancellation."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from servers import FakeServer, QuietHTTPServer, Served

from lockbuild import fsio
from lockbuild.cli import main
from lockbuild.errors import FetchError, IntegrityError
from lockbuild.fetch.batch import Batch
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.fetch.http import make_client
from lockbuild.progress import Progress

MiB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(n: int, seed: str = "x") -> bytes:
    return hashlib.shake_256(seed.encode()).digest(n)


def wanted(url: str, data: bytes, label: str = "f.bin", **kw: object) -> Wanted:
    return Wanted(url, sha(data), len(data), label, **kw)  # type: ignore[arg-type]


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        c.follow_redirects = True  # as session.py makes the downloads client
        yield c


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_fetcher(cache: Cache, client: httpx.Client, sleeps: list[float]) -> Callable[..., Fetcher]:
    def make(**kw: object) -> Fetcher:
        return Fetcher(cache, client, sleep=sleeps.append, **kw)  # type: ignore[arg-type]

    return make


def entries(cache: Cache) -> list[Path]:
    return sorted(p for p in cache.files.rglob("*") if p.is_file()) if cache.files.exists() else []


def temps(cache: Cache) -> list[Path]:
    return sorted(cache.tmp.iterdir()) if cache.tmp.exists() else []


def add_generated(server: FakeServer, path: str, gen: Callable[[], Iterator[bytes]], size: int) -> str:
    server.files[path] = Served(gen, size)
    return f"{server.url}{path}"


# resume, restart, retries ----------------------------------------------------------------------
def test_dropped_connection_resumes_with_range(srv: FakeServer, make_fetcher, cache: Cache, sleeps) -> None:
    data = blob(3 * MiB + 12345)
    cut = 1_500_007
    url = srv.add_file("/f.bin", data, drop_after=cut)
    report = make_fetcher().fetch_all([wanted(url, data)])
    served = srv.files["/f.bin"]
    assert served.ranges == [f"bytes={cut}-"]
    assert served.hits == 2
    assert report.files[0].downloaded and report.files[0].path.read_bytes() == data
    assert report.files[0].path == cache.path(sha(data))
    assert sleeps == [0.25]
    assert temps(cache) == []
    sent = [h for p, h in srv.request_headers if p == "/f.bin"]
    assert all(h["accept-encoding"] == "identity" for h in sent)  # raw bytes, so the digest is of the file


class Counted(Progress):
    def __init__(self) -> None:
        super().__init__(io.StringIO(), enabled=False)
        self.bytes = 0

    def advance(self, n: int) -> None:
        self.bytes += n


@pytest.mark.parametrize("cut", [700_001, MiB + 700_001])  # inside the first gathered MiB, and after it
def test_server_ignoring_range_restarts_cleanly(srv: FakeServer, make_fetcher, cache: Cache, cut: int) -> None:
    data = blob(2 * MiB + 7, "ignore")
    url = srv.add_file("/f.bin", data, drop_after=cut, ignore_range=True)
    counted = Counted()
    report = make_fetcher(progress=counted).fetch_all([wanted(url, data)])
    served = srv.files["/f.bin"]
    assert served.ranges == [f"bytes={cut}-"] and served.hits == 2
    assert report.files[0].path.read_bytes() == data  # not the first bytes twice
    assert counted.bytes == len(data)  # the progress shown takes back what the restart threw away
    assert temps(cache) == []


def test_a_range_answer_for_other_bytes_restarts_and_never_appends_them(
    srv: FakeServer, make_fetcher, cache: Cache
) -> None:
    """Asked for the bytes after a dropped connection, the server answers 206 with the file from byte 0:
    those bytes are not appended after the ones received; the fetch starts again and keeps the file."""
    data = blob(2 * MiB + 5, "from-zero")
    cut = 700_001
    url = srv.add_file("/f.bin", data, drop_after=cut, range_from_zero=True)
    report = make_fetcher().fetch_all([wanted(url, data)])
    served = srv.files["/f.bin"]
    assert served.ranges == [f"bytes={cut}-"] and served.hits == 3
    assert report.files[0].path.read_bytes() == data
    assert temps(cache) == []


def test_500_then_200_is_retried(srv: FakeServer, make_fetcher, sleeps) -> None:
    data = blob(10_000, "retry")
    url = srv.add_file("/f.bin", data, fail_first=2)
    report = make_fetcher().fetch_all([wanted(url, data)])
    assert srv.files["/f.bin"].hits == 3
    assert report.files[0].path.read_bytes() == data
    assert sleeps == [0.25, 0.5]


def test_persistent_500_fails_after_the_retries(srv: FakeServer, make_fetcher, cache: Cache, sleeps) -> None:
    data = blob(10_000, "down")
    url = srv.add_file("/f.bin", data, fail_first=1000)
    with pytest.raises(FetchError) as err:
        make_fetcher(retries=3).fetch_all([wanted(url, data, "f.bin")])
    assert srv.files["/f.bin"].hits == 4
    assert sleeps == [0.25, 0.5, 1.0]
    assert f"f.bin: {url} failed 4 times in a row; last: HTTP 500" in err.value.message
    assert entries(cache) == [] and temps(cache) == []


def test_not_found_is_not_retried(srv: FakeServer, make_fetcher, sleeps) -> None:
    with pytest.raises(FetchError, match=r"answered HTTP 404; expected 200"):
        make_fetcher().fetch_all([Wanted(f"{srv.url}/missing.whl", "a" * 64, 10, "missing.whl")])
    assert sleeps == []


def test_unreachable_server_fails_after_the_retries(make_fetcher, cache: Cache, sleeps) -> None:
    with pytest.raises(FetchError, match=r"failed 3 times in a row; last: ConnectError"):
        make_fetcher(retries=2).fetch_all([Wanted("http://127.0.0.1:9/x.whl", "a" * 64, 10, "x.whl")])
    assert len(sleeps) == 2 and temps(cache) == []


# refusals ----------------------------------------------------------------------------------------
def test_one_wrong_byte_is_refused_and_nothing_is_cached(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    data = blob(300_000, "corrupt")
    bad = bytearray(data)
    bad[123_456] ^= 0xFF
    url = srv.add_file("/f.bin", data, corrupt_at=123_456)
    with pytest.raises(IntegrityError) as err:
        make_fetcher().fetch_all([wanted(url, data, "f.bin")])
    assert f"expected {sha(data)}, found {sha(bytes(bad))}" in err.value.message
    assert srv.files["/f.bin"].hits == 1  # a wrong file is refused, not asked for again
    assert cache.tmp.is_dir() and temps(cache) == [] and entries(cache) == []


def test_short_file_is_refused(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    data = blob(5000, "short")
    url = srv.add_file("/f.bin", data)
    with pytest.raises(IntegrityError, match=r"expected at most 5010 bytes|expected 5010 bytes .* received 5000"):
        make_fetcher().fetch_all([Wanted(url, sha(data), 5010, "f.bin")])
    assert entries(cache) == [] and temps(cache) == []


def test_body_bigger_than_the_lock_says_is_refused_without_reading_it(
    srv: FakeServer, make_fetcher, cache: Cache
) -> None:
    sent = [0]
    chunk = bytes(MiB)

    def endless() -> Iterator[bytes]:
        while True:
            sent[0] += len(chunk)
            yield chunk

    url = add_generated(srv, "/huge.bin", endless, 1 << 40)
    started = time.monotonic()
    with pytest.raises(
        IntegrityError, match=r"huge.bin: expected at most 1048576 bytes .* the server announced 1099511627776; refused"
    ):
        make_fetcher().fetch_all([Wanted(url, "b" * 64, MiB, "huge.bin")])
    assert time.monotonic() - started < 10
    assert entries(cache) == [] and temps(cache) == []
    time.sleep(0.2)
    assert sent[0] < 64 * MiB  # what sat in socket buffers when the client hung up, not the terabyte


class _Unannounced(BaseHTTPRequestHandler):
    """Answers with no Content-Length (HTTP/1.0, body until close): 3 MiB, then closes."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(blob(3 * MiB, "unannounced"))


def test_a_body_longer_than_the_lock_says_and_not_announced_is_cut_at_the_lock_s_size(
    make_fetcher, cache: Cache
) -> None:
    """No Content-Length to refuse before reading: the fetch stops at the lock's size, the moment one
    byte more arrives, and says the server sent more; nothing is kept."""
    httpd = QuietHTTPServer(("127.0.0.1", 0), _Unannounced)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/longer.bin"
        data = blob(3 * MiB, "unannounced")[:MiB]
        with pytest.raises(IntegrityError, match=r"expected at most 1048576 bytes .* the server sent more; refused"):
            make_fetcher().fetch_all([Wanted(url, sha(data), MiB, "longer.bin")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert entries(cache) == [] and temps(cache) == []


class _Endless(BaseHTTPRequestHandler):
    """Answers with no Content-Length (HTTP/1.0, body until close) and never stops sending."""

    sent = 0

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        chunk = bytes(256 << 10)
        try:
            while True:
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:
            return


@pytest.fixture
def endless_url() -> Iterator[str]:
    _Endless.sent = 0
    httpd = QuietHTTPServer(("127.0.0.1", 0), _Endless)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/endless"
    httpd.shutdown()
    httpd.server_close()


def test_endless_body_of_unsized_file_is_refused(endless_url: str, make_fetcher, cache: Cache) -> None:
    with pytest.raises(IntegrityError, match=r"expected at most 4194304 bytes .* the server sent more; refused"):
        make_fetcher(max_unsized=4 * MiB).fetch_all([Wanted(endless_url, "c" * 64, None, "endless")])
    time.sleep(0.2)
    assert _Endless.sent < 64 * MiB
    assert entries(cache) == [] and temps(cache) == []


# the cache ---------------------------------------------------------------------------------------
def test_cached_file_is_never_fetched_again(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    data = blob(50_000, "cached")
    url = srv.add_file("/f.bin", data)
    first = make_fetcher().fetch_all([wanted(url, data), wanted(url, data, "same bytes, listed twice")])
    assert srv.files["/f.bin"].hits == 1 and first.cached == 0 and len(first.files) == 1
    second = make_fetcher().fetch_all([wanted(url, data)])
    assert srv.files["/f.bin"].hits == 1
    assert second.cached == 1 and not second.files[0].downloaded and second.downloaded_bytes == 0
    assert second.files[0].path.read_bytes() == data
    with open_verified(make_fetcher(), wanted(url, data)) as f:  # the planner's way to one file
        assert f.read() == data
    assert srv.files["/f.bin"].hits == 1


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_cache_entry_is_fetched_again(srv: FakeServer, make_fetcher, cache: Cache, damage: str) -> None:
    data = blob(50_000, "entry")
    url = srv.add_file("/f.bin", data)
    entry = make_fetcher().fetch_all([wanted(url, data)]).files[0].path
    if damage == "flip":
        bad = bytearray(data)
        bad[10] ^= 1
        entry.write_bytes(bytes(bad))
    else:
        entry.write_bytes(data[:-1])
    report = make_fetcher().fetch_all([wanted(url, data)])
    assert srv.files["/f.bin"].hits == 2
    assert report.files[0].downloaded and entry.read_bytes() == data


def test_temp_file_is_never_taken_for_an_entry(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    data = blob(20_000, "temp")
    url = srv.add_file("/f.bin", data)
    cache.tmp.mkdir(parents=True)
    leftover = cache.tmp / f"{sha(data)}.4242.deadbeef.part"
    leftover.write_bytes(data)  # even a complete one: only a verified commit makes an entry
    assert cache.lookup(sha(data), len(data)) is None
    report = make_fetcher().fetch_all([wanted(url, data)])
    assert srv.files["/f.bin"].hits == 1 and report.files[0].downloaded
    assert temps(cache) == [leftover]


def test_malformed_digest_never_becomes_a_cache_path(make_fetcher, cache: Cache) -> None:
    with pytest.raises(IntegrityError, match=r"expected a sha256 of 64 lowercase hex digits, found '../../etc'"):
        make_fetcher().fetch_all([Wanted("http://127.0.0.1:9/x", "../../etc", 1, "x")])
    assert not (cache.root.parent / "etc").exists()


def test_sweep_removes_only_stale_temp_files(cache: Cache) -> None:
    cache.tmp.mkdir(parents=True)
    old, fresh = cache.tmp / "a.1.x.part", cache.tmp / "b.2.y.part"
    old.write_bytes(b"old")
    fresh.write_bytes(b"fresh")
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    assert cache.sweep() == 1
    assert temps(cache) == [fresh]


KILLED_FETCH = """
import sys
from pathlib import Path
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import make_client

url, digest, size, root = sys.argv[1:]
with make_client() as client:
    Fetcher(Cache(Path(root)), client).fetch_all([Wanted(url, digest, int(size), "big")])
"""


def test_killed_fetch_leaves_no_entry(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    data = blob(8 * MiB, "killed")
    slow = threading.Event()
    slow.set()

    def trickle() -> Iterator[bytes]:
        for i in range(0, len(data), 64 << 10):
            if slow.is_set():
                time.sleep(0.05)
            yield data[i : i + (64 << 10)]

    url = add_generated(srv, "/big.bin", trickle, len(data))
    child = subprocess.Popen([sys.executable, "-c", KILLED_FETCH, url, sha(data), str(len(data)), str(cache.root)])
    try:
        deadline = time.monotonic() + 30
        while not any(p.stat().st_size > 0 for p in temps(cache)):
            assert child.poll() is None and time.monotonic() < deadline, "the fetch never started writing"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert entries(cache) == []
    (part,) = temps(cache)
    assert 0 < part.stat().st_size < len(data)
    slow.clear()
    report = make_fetcher().fetch_all([wanted(url, data, "big")])
    assert report.files[0].downloaded and report.files[0].path.read_bytes() == data


# parallelism and cancellation --------------------------------------------------------------------
def test_downloads_run_in_parallel_but_bounded(srv: FakeServer, make_fetcher) -> None:
    lock = threading.Lock()
    active = [0, 0]  # now, most ever

    def body(data: bytes) -> Callable[[], Iterator[bytes]]:
        def gen() -> Iterator[bytes]:
            with lock:
                active[0] += 1
                active[1] = max(active[1], active[0])
            try:
                time.sleep(0.3)  # long enough for every worker to be in a transfer at once
                yield data
            finally:
                with lock:
                    active[0] -= 1

        return gen

    files = [blob(1000 + i, f"p{i}") for i in range(7)]
    want = [Wanted(add_generated(srv, f"/p{i}", body(d), len(d)), sha(d), len(d), f"p{i}") for i, d in enumerate(files)]
    report = make_fetcher(jobs=3).fetch_all(want)
    assert active[1] == 3
    assert [f.path.read_bytes() for f in report.files] == files  # in the order asked for


def gated(data: bytes, started: threading.Event, release: threading.Event) -> Callable[[], Iterator[bytes]]:
    """A body that sends its first 64 KiB, says so, and sends the rest once released."""

    def gen() -> Iterator[bytes]:
        yield data[: 1 << 16]
        started.set()
        release.wait(10)
        for i in range(1 << 16, len(data), 1 << 16):
            yield data[i : i + (1 << 16)]

    return gen


def test_a_batch_keeps_a_window_of_bytes_in_flight(srv: FakeServer, make_fetcher) -> None:
    """A build packs members in order while they download. A batch starts files in that order while the
    ones in flight add up to less than ``ahead`` bytes (and always two), so the file the packer waits for
    does not share the network with a row of large ones (the vLLM build's packer sat idle for 25 s behind
    eight CUDA wheels). Two files larger than the window still download side by side."""
    files = {"a": blob(3 * MiB, "a"), "b": blob(3 * MiB, "b"), "c": blob(1000, "c"), "d": blob(1000, "d")}
    started = {"a": threading.Event(), "b": threading.Event()}
    release = threading.Event()
    want = [
        wanted(add_generated(srv, f"/{k}", gated(files[k], started[k], release), MiB * 3), files[k], k)
        for k in ("a", "b")
    ]
    want += [wanted(srv.add_file(f"/{k}", files[k]), files[k], k) for k in ("c", "d")]
    batch = Batch(make_fetcher(jobs=8), want, ahead=4 * MiB)
    try:
        assert started["a"].wait(5) and started["b"].wait(5)  # both large files at once
        time.sleep(0.3)
        held_back = (srv.files["/c"].hits, srv.files["/d"].hits)
        release.set()
        assert batch.path(want[0].sha256).read_bytes() == files["a"]
        assert batch.path(want[3].sha256).read_bytes() == files["d"]
        report = batch.finish()
    except BaseException:
        release.set()
        batch.abort()
        raise
    assert held_back == (0, 0)  # 6 MiB in flight: c and d wait for the window
    assert [f.path.read_bytes() for f in report.files] == list(files.values())
    assert all(srv.files[f"/{k}"].hits == 1 for k in files)


def test_a_cache_hit_does_not_hold_back_the_next_download(srv: FakeServer, make_fetcher) -> None:
    """A cached file is done at once, so it leaves the window at once: the next download overlaps the
    packing of the cached one (a partly warm rebuild)."""
    a, a2, b = blob(8 * MiB, "cached"), blob(8 * MiB, "cached too"), blob(MiB, "miss")
    ua, ua2, ub = srv.add_file("/a", a), srv.add_file("/a2", a2), srv.add_file("/b", b)
    fetcher = make_fetcher(jobs=2)
    fetcher.fetch_all([wanted(ua, a, "a"), wanted(ua2, a2, "a2")])
    fetcher.hash_hits = False  # as fetch_and_write sets it
    batch = Batch(fetcher, [wanted(ua, a, "a"), wanted(ua2, a2, "a2"), wanted(ub, b, "b")], ahead=4 * MiB)
    try:
        batch.path(wanted(ua, a).sha256)  # 16 MiB of cache hits: done at once, out of the window at once
        deadline = time.monotonic() + 5
        while srv.files["/b"].hits == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.files["/b"].hits == 1  # started before the reader asked for it
        batch.finish()
    except BaseException:
        batch.abort()
        raise


def test_one_failure_cancels_the_rest(srv: FakeServer, make_fetcher, cache: Cache) -> None:
    big = blob(32 * MiB, "slow")
    stopped = threading.Event()

    def trickle() -> Iterator[bytes]:
        try:
            for i in range(0, len(big), 64 << 10):
                time.sleep(0.02)  # ~3 MB/s: 10 s for the whole file
                yield big[i : i + (64 << 10)]
        finally:
            stopped.set()

    want = [
        wanted(add_generated(srv, "/big.bin", trickle, len(big)), big, "big.bin"),
        Wanted(f"{srv.url}/gone.whl", "d" * 64, 100, "gone.whl"),
    ]
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"^gone.whl: .* answered HTTP 404"):
        make_fetcher(jobs=2).fetch_all(want)
    assert time.monotonic() - started < 5
    assert entries(cache) == [] and temps(cache) == []  # the cancelled transfer removed its temp file
    assert stopped.wait(5)


# redirects and credentials -----------------------------------------------------------------------
def test_redirect_to_another_host_drops_authorization(make_fetcher) -> None:
    github, storage = FakeServer(), FakeServer()
    try:
        data = blob(2 * MiB, "asset")
        storage.add_file("/objects/asset", data, drop_after=MiB + 3)
        github.redirects["/gh/o/r/releases/download/v1/asset.tgz"] = f"{storage.url}/objects/asset"
        w = Wanted(
            f"{github.url}/gh/o/r/releases/download/v1/asset.tgz",
            sha(data),
            len(data),
            "asset.tgz",
            (("Authorization", "Bearer ghp_not_for_storage"),),
        )
        report = make_fetcher().fetch_all([w])
        assert report.files[0].path.read_bytes() == data
        asked = [h for p, h in github.request_headers]
        assert len(asked) == 2 and all(h["authorization"] == "Bearer ghp_not_for_storage" for h in asked)
        served = [h for p, h in storage.request_headers]
        assert len(served) == 2 and not any("authorization" in h for h in served)
        assert storage.files["/objects/asset"].ranges == [f"bytes={MiB + 3}-"]  # resumed through the redirect
    finally:
        github.close()
        storage.close()


def test_small_network_reads_are_gathered_into_whole_mib_writes(
    srv: FakeServer, cache: Cache, client: httpx.Client
) -> None:
    """A body that arrives in 16 KiB pieces (one TLS record each) is hashed and written a MiB at a time:
    each write and hash update costs a GIL hand-off, and eight downloads at once spent a third of their time
    switching threads when every record took two. The cut of a dropped transfer is still kept exactly."""
    data = blob(5 * MiB + 999, "gathered")
    step = 16 << 10
    url = add_generated(srv, "/g.bin", lambda: (data[i : i + step] for i in range(0, len(data), step)), len(data))
    writes: list[int] = []
    real_create = fsio.create_new

    class Counting(io.BufferedWriter):
        def write(self, b: bytes) -> int:  # type: ignore[override]
            writes.append(len(b))
            return super().write(b)

    def counting_create(name: Path, **kw: object) -> io.BufferedWriter:
        f = real_create(name, **kw)  # type: ignore[arg-type]
        return Counting(f.detach())  # type: ignore[attr-defined]

    mp = pytest.MonkeyPatch()
    mp.setattr(fsio, "create_new", counting_create)
    try:
        report = Fetcher(cache, client).fetch_all([wanted(url, data, "g.bin")])
    finally:
        mp.undo()
    assert report.files[0].path.read_bytes() == data
    assert sum(writes) == len(data)
    assert len(writes) <= 7, writes  # five whole MiB (or a record over) and the tail, not 330 records
    assert all(n >= MiB for n in writes[:-1]), writes


# memory ------------------------------------------------------------------------------------------
BIG_FETCH = """
import json, resource, sys
from pathlib import Path
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import make_client

url, digest, size, root = sys.argv[1:]
with make_client() as client:
    fetcher = Fetcher(Cache(Path(root)), client)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = fetcher.fetch_all([Wanted(url, digest, int(size), "2gb.bin")])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
path = report.files[0].path
print(json.dumps({"before_kib": before, "after_kib": after, "path": str(path), "size": path.stat().st_size}))
"""
GROWTH_BOUND = 64 * MiB


@pytest.mark.slow  # over 5 s
def test_two_gigabyte_file_keeps_memory_flat(srv: FakeServer, cache: Cache) -> None:
    """A 2 GiB body generated on the fly: the fetching process's peak RSS grows by less than 64 MiB."""
    block = blob(MiB, "block")
    count = 2048
    h = hashlib.sha256()
    for _ in range(count):
        h.update(block)

    def body() -> Iterator[bytes]:
        for _ in range(count):
            yield block

    url = add_generated(srv, "/2gb.bin", body, count * MiB)
    got = subprocess.run(
        [sys.executable, "-c", BIG_FETCH, url, h.hexdigest(), str(count * MiB), str(cache.root)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    try:
        assert result["size"] == count * MiB
        growth = (result["after_kib"] - result["before_kib"]) * 1024
        assert growth < GROWTH_BOUND, f"peak RSS grew by {growth / MiB:.0f} MiB fetching 2 GiB"
    finally:
        Path(result["path"]).unlink()


# progress ----------------------------------------------------------------------------------------
class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(p: Progress) -> None:
    p.start("fetching", total_bytes=2_000_000, files=2)
    p.advance(1_000_000)
    p.file_done()
    p.advance(1_000_000)
    p.file_done()
    p.finish("fetched 2 file(s)")


def test_progress_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    _drive(Progress(out))
    assert out.getvalue() == "lockbuild: fetching: 2 file(s), 2.0 MB\nlockbuild: fetched 2 file(s)\n"


def test_progress_live_line_on_a_terminal() -> None:
    out = _Tty()
    _drive(Progress(out))
    text = out.getvalue()
    assert "\r\x1b[Kfetching [########################] 100%  2.0 MB/2.0 MB  " in text and "2/2 files" in text
    assert text.endswith("\r\x1b[Klockbuild: fetched 2 file(s)\n")


@pytest.mark.parametrize("stream", [io.StringIO, _Tty])
def test_progress_silent_when_disabled(stream: type[io.StringIO]) -> None:
    out = stream()
    _drive(Progress(out, enabled=False))
    assert out.getvalue() == ""


def test_fetcher_reports_progress(srv: FakeServer, cache: Cache, client: httpx.Client) -> None:
    data = blob(1500, "progress")
    url = srv.add_file("/f.bin", data)
    out = io.StringIO()
    Fetcher(cache, client, progress=Progress(out)).fetch_all([wanted(url, data)])
    Fetcher(cache, client, progress=Progress(out)).fetch_all([wanted(url, data)])
    lines = out.getvalue().splitlines()
    assert lines[0] == "lockbuild: fetching: 1 file(s), 1.5 KB"
    assert lines[1].startswith("lockbuild: fetched 1 file: 1 downloaded, 0 from the cache, in ")
    assert lines[3].startswith("lockbuild: fetched 1 file: 0 downloaded, 1 from the cache, in ")


# the command -------------------------------------------------------------------------------------
def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_fetch_command_writes_the_build_and_reuses_the_cache(env: FakeServer, toy_recipe: Path, tmp_path: Path) -> None:
    out = tmp_path / "fetched"
    code, stdout, stderr = run("fetch", str(toy_recipe), "--out", str(out), "--json")
    assert code == 0, stderr
    (first,) = json.loads(stdout)["fetches"]
    build = out / "1.0-cpu"
    assert sorted(p.name for p in build.iterdir()) == [
        "extras.txt",
        "provenance.json",
        "recipe.toml",
        "requirements.txt",
        "tools",
        "wheels",
    ]
    assert sorted(p.name for p in (build / "wheels").iterdir()) == [
        "toydep-1.0-py3-none-any.whl",
        "toyengine-1.0-py3-none-any.whl",
    ]
    (tool,) = (build / "tools").iterdir()
    assert tool.name.startswith("uv-") and tool.suffix == ".whl"
    for pkg in first["packages"]:
        assert sha((build / "wheels" / pkg["file"]).read_bytes()) == pkg["sha256"]
    assert sha(tool.read_bytes()) == first["extras"][0]["sha256"]
    # the uv wheel is recorded in the lock directory with its sha256 and address, in a file uv
    # never installs from (lock/requirements.txt would put uv into the engine's environment)
    record = f"tool tools/{tool.name} {first['extras'][0]['sha256']} {first['extras'][0]['url']}"
    assert record in (build / "extras.txt").read_text().splitlines()
    assert not any(line.startswith("uv==") for line in (build / "requirements.txt").read_text().splitlines())
    assert "as-of = 2025-01-06T00:00:00Z" in (build / "recipe.toml").read_text()
    assert "toydep==1.0" in (build / "requirements.txt").read_text()
    assert first["files"] == 3 and first["cached"] == 0 and first["downloaded_bytes"] > 0

    code, stdout, stderr = run("fetch", str(toy_recipe), "--out", str(out), "--json")
    assert code == 0, stderr
    (second,) = json.loads(stdout)["fetches"]
    assert second["cached"] == second["files"] == 3 and second["downloaded_bytes"] == 0
    assert not [p for p in out.iterdir() if p.name.endswith(".partial")]
