"""uv's resolution remembered by its inputs (resolution/memo.py), and index look-ups started on uv's hints
(fetch/lookahead.py, resolve.read_uv_stderr): a warm lock runs no uv, and neither changes what is locked."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, day
from servers import FakeServer, make_wheel

from lockbuild.cli import main
from lockbuild.errors import RemoteError
from lockbuild.fetch.lookahead import Lookahead
from lockbuild.resolution.memo import MAX_ENTRY_BYTES, ResolutionMemo, parse_entry, resolution_key
from lockbuild.resolution.resolve import MAX_MESSAGE_LINES, compile_lock, read_uv_stderr
from lockbuild.target import Target
from lockbuild.times import iso


def recipe(tmp_path: Path, engine: str, *, extra: str = "") -> Path:
    path = tmp_path / f"{engine}.toml"
    path.write_text(
        f'[engine]\nname = "{engine}"\npypi = "{engine}"\nbinary = "{engine}"\nverify = ["{engine}"]\n'
        f'\n[[builds]]\nversion = "1.0"\nvariant = "cpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f'requirements = ["{engine}==1.0"]\n{extra}'
    )
    return path


def publish_engine(server: FakeServer, engine: str) -> None:
    """ENGINE 1.0 (day 5: cut-off day 6) needing ENGINE-dep, which has 1.0 and 1.1 before the cut-off."""
    if ("primary", engine) in server.projects:
        return
    server.publish(*make_wheel(engine, "1.0", deps=(f"{engine}-dep",)), uploaded=day(5))
    server.publish(*make_wheel(f"{engine}-dep", "1.0"), uploaded=day(1))
    server.publish(*make_wheel(f"{engine}-dep", "1.1"), uploaded=day(2))


def lock(path: Path, out: Path, *args: str) -> dict[str, object]:
    r = CliRunner().invoke(main, ["lock", str(path), "--out", str(out), "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    got: dict[str, object] = json.loads(r.stdout)["locks"][0]
    got.pop("gpu_fit"), got.pop("gpu_fit_unread")  # measured once a wheel is in the cache (tests/gpu/test_gpu_lock.py)
    return got


def uv_requests(server: FakeServer, since: int) -> list[str]:
    return [p for p, h in server.request_headers[since:] if h.get("user-agent", "").startswith("uv/")]


def versions(doc: dict[str, object]) -> dict[str, str]:
    packages = doc["packages"]
    assert isinstance(packages, list)
    return {p["name"]: p["version"] for p in packages}


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "resolutions").iterdir())


# --------------------------------------------------------------------------- reuse, and when it stops
def test_a_second_lock_reuses_the_resolution_and_runs_no_uv(env: FakeServer, tmp_path: Path) -> None:
    publish_engine(env, "lmone")
    path = recipe(tmp_path, "lmone")
    before = len(env.request_headers)
    first = lock(path, tmp_path / "a")
    assert first["resolution_reused"] is False and uv_requests(env, before)
    middle = len(env.request_headers)
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is True
    assert uv_requests(env, middle) == []  # uv never ran
    assert [p for p in env.request_headers[middle:] if p[0].startswith("/primary/simple/lmone-dep/")]  # still checked
    first.pop("resolution_reused")
    assert first == second
    assert (tmp_path / "a/1.0-cpu/requirements.txt").read_bytes() == (
        tmp_path / "b/1.0-cpu/requirements.txt"
    ).read_bytes()


def test_fresh_lock_runs_uv_even_when_the_resolution_is_remembered(env: FakeServer, tmp_path: Path) -> None:
    publish_engine(env, "lmfresh")
    path = recipe(tmp_path, "lmfresh")
    lock(path, tmp_path / "a")
    before = len(env.request_headers)
    got = lock(path, tmp_path / "b", "--fresh-lock")
    assert got["resolution_reused"] is False and uv_requests(env, before)
    assert lock(path, tmp_path / "c")["resolution_reused"] is True  # and it was remembered again


def test_a_pin_yanked_between_two_locks_is_resolved_afresh(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_engine(env, "lmyank")
    path = recipe(tmp_path, "lmyank")
    assert versions(lock(path, tmp_path / "a"))["lmyank-dep"] == "1.1"
    (newest,) = [e for e in env.projects[("primary", "lmyank-dep")] if "1.1" in e.filename]
    monkeypatch.setattr(newest, "yanked", "broken build")
    before = len(env.request_headers)
    again = lock(path, tmp_path / "b")
    assert again["resolution_reused"] is False and uv_requests(env, before)  # the memory did not hold: uv ran
    assert versions(again)["lmyank-dep"] == "1.0"
    monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(tmp_path / "another-cache"))
    fresh = lock(path, tmp_path / "c")
    again.pop("resolution_reused")
    fresh.pop("resolution_reused")
    assert again == fresh  # what a fresh lock gives
    assert lock(path, tmp_path / "d")["resolution_reused"] is True  # the new answer is the one remembered


@pytest.mark.parametrize("damage", ["garbage", "other-key", "too-large", "symlink", "group-writable", "directory"])
def test_a_damaged_memory_is_ignored(env: FakeServer, tmp_path: Path, damage: str) -> None:
    publish_engine(env, "lmdamage")
    path = recipe(tmp_path, "lmdamage")
    first = lock(path, tmp_path / "a")
    cache = tmp_path / "cache"
    (entry,) = entries(cache)
    if damage == "garbage":
        entry.write_bytes(b"\x00not json")
    elif damage == "other-key":
        doc = json.loads(entry.read_text())
        doc["key"] = "0" * 64
        entry.write_text(json.dumps(doc))
    elif damage == "too-large":
        entry.write_bytes(b" " * (MAX_ENTRY_BYTES + 1))
    elif damage == "symlink":
        real = tmp_path / "elsewhere.json"
        real.write_bytes(entry.read_bytes())
        entry.unlink()
        entry.symlink_to(real)
    elif damage == "group-writable":
        entry.chmod(0o664)
    else:
        entry.unlink()
        entry.mkdir()
    before = len(env.request_headers)
    second = lock(path, tmp_path / "b")
    assert second["resolution_reused"] is False and uv_requests(env, before)
    first.pop("resolution_reused")
    second.pop("resolution_reused")
    assert first == second


def test_a_remembered_pin_edited_to_another_file_is_checked_like_uv_s(env: FakeServer, tmp_path: Path) -> None:
    """The memory is no more trusted than uv: a digest the index does not give fails the check, and the
    lock resolves afresh (an entry edited by hand, or a file replaced on the index, ends the same way)."""
    publish_engine(env, "lmedit")
    path = recipe(tmp_path, "lmedit")
    first = lock(path, tmp_path / "a")
    (entry,) = entries(tmp_path / "cache")
    doc = json.loads(entry.read_text())
    packages = first["packages"]
    assert isinstance(packages, list)
    dep = next(p for p in packages if p["name"] == "lmedit-dep")
    doc["text"] = doc["text"].replace(dep["sha256"], "f" * 64)
    entry.write_text(json.dumps(doc))
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is False
    first.pop("resolution_reused")
    assert first == second


def test_index_credentials_never_reach_the_memory(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_engine(env, "lmcred")
    secret = "m3m0-s3cr3t-77"
    host = env.url.removeprefix("http://")
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", f"http://lmuser:{secret}@{host}/primary/simple")
    monkeypatch.setattr(env, "require_auth", "Basic " + base64.b64encode(f"lmuser:{secret}".encode()).decode())
    path = recipe(tmp_path, "lmcred")
    first = lock(path, tmp_path / "a")
    assert first["resolution_reused"] is False
    stored = entries(tmp_path / "cache")
    assert stored
    for p in stored:
        raw = p.read_bytes()
        assert secret.encode() not in raw and b"lmuser" not in raw and p.name.isalnum()
    other = "an0ther-s3cr3t"  # another password for the same index: the key never held the first
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", f"http://lmuser:{other}@{host}/primary/simple")
    monkeypatch.setattr(env, "require_auth", "Basic " + base64.b64encode(f"lmuser:{other}".encode()).decode())
    assert lock(path, tmp_path / "b")["resolution_reused"] is True


def test_an_answer_holding_a_credential_is_not_remembered(tmp_path: Path) -> None:
    memo = ResolutionMemo(tmp_path / "resolutions")
    key = "a" * 64
    assert not memo.put(key, "requirements.txt", "x==1 # https://u:hunter2@host/\n", secrets_held=("hunter2",))
    assert memo.get(key) is None
    assert memo.put(key, "requirements.txt", "x==1\n", secrets_held=("hunter2",))
    got = memo.get(key)
    assert got is not None and got.text == "x==1\n"
    assert (tmp_path / "resolutions").stat().st_mode & 0o077 == 0 and (
        tmp_path / "resolutions" / key
    ).stat().st_mode & 0o077 == 0


def test_the_key_is_every_input_but_paths_and_secrets() -> None:
    base = {
        "uv_version": "0.13.9",
        "argv": ["pip", "compile", "--exclude-newer", "2025-01-06T00:00:00Z", "-"],
        "stdin": "x==1\n",
        "project": None,
        "index_url": "https://index.invalid/simple",
        "authenticated": False,
    }
    k = resolution_key(**base)  # type: ignore[arg-type]
    for name, value in [
        ("uv_version", "0.14.0"),
        ("argv", ["pip", "compile", "--exclude-newer", "2025-01-07T00:00:00Z", "-"]),
        ("stdin", "x==2\n"),
        ("project", "[project]\n"),
        ("index_url", "https://mirror.example/simple"),
        ("authenticated", True),
    ]:
        assert resolution_key(**{**base, name: value}) != k, name  # type: ignore[arg-type]
    assert parse_entry(b'{"format": 1, "key": "' + k.encode() + b'", "lock-format": "x", "text": ""}', k) is None


def test_the_oldest_memories_go_beyond_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lockbuild.resolution.memo as memo_module

    monkeypatch.setattr(memo_module, "MAX_ENTRIES", 3)
    memo = ResolutionMemo(tmp_path)
    keys = [f"{i:064x}" for i in range(5)]
    for i, key in enumerate(keys):
        assert memo.put(key, "requirements.txt", f"x=={i}\n")
        os.utime(tmp_path / key, (1_000_000 + i, 1_000_000 + i))
    assert memo.put(keys[4], "requirements.txt", "x==4\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keys[2:])


# --------------------------------------------------------------------------- look-ups on uv's hints
def test_uv_s_log_names_each_version_it_chooses(env: FakeServer, tmp_path: Path) -> None:
    """The hint the look-ups start on: if uv's log format changes, this fails (locks stay correct)."""
    publish_engine(env, "lmhint")
    seen: list[tuple[str, str]] = []
    lock_hint = threading.Lock()

    def hint(name: str, version: str) -> None:
        with lock_hint:
            seen.append((name, version))

    (tmp_path / "w").mkdir()
    got = compile_lock(
        ["lmhint==1.0"],
        Target.of(PY, PLATFORM),
        day(6),
        index_url=env.index_url(),
        workdir=tmp_path / "w",
        cache_dir=tmp_path / "uv-cache",
        on_select=hint,
        inherit={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )
    assert "lmhint-dep==1.1" in got.text
    assert {("lmhint", "1.0"), ("lmhint-dep", "1.1")} <= set(seen)


def test_a_failed_resolution_shows_uv_s_message_without_its_log(env: FakeServer, tmp_path: Path) -> None:
    publish_engine(env, "lmfail")
    path = recipe(tmp_path, "lmfail", extra="")
    path.write_text(
        path.read_text().replace('requirements = ["lmfail==1.0"]', 'requirements = ["lmfail==1.0", "lmfail-dep==9"]')
    )
    r = CliRunner().invoke(main, ["lock", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0
    assert "lmfail-dep" in r.stderr and "DEBUG" not in r.stderr and "Selecting" not in r.stderr


def test_uv_s_stderr_keeps_its_messages_and_drops_its_log() -> None:
    log = (
        b"DEBUG Solving with target Python version: >=3.12\n"
        b"DEBUG Selecting: torch==2.8.0 [compatible] (torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl)\n"
        b"WARN something internal\n"
        b"DEBUG Selecting: Foo_Bar==1.0rc1+local [compatible] (foo_bar-1.0rc1.whl)\n"
        b"DEBUG Selecting: not a pin\n"
        b"error: No solution found when resolving dependencies\n"
        b"  cause: Because you require x==9, we can conclude that your requirements are unsatisfiable.\n"
    )
    seen: list[tuple[str, str]] = []
    text = read_uv_stderr(io.BytesIO(log), lambda n, v: seen.append((n, v)))
    assert seen == [("torch", "2.8.0"), ("Foo_Bar", "1.0rc1+local")]
    assert text == (
        "error: No solution found when resolving dependencies\n"
        "  cause: Because you require x==9, we can conclude that your requirements are unsatisfiable.\n"
    )
    many = b"".join(f"line {i}\n".encode() for i in range(MAX_MESSAGE_LINES * 3)) + b"x" * 100_000 + b"\nend\n"
    kept = read_uv_stderr(io.BytesIO(many), None)
    assert kept.endswith("end\n") and len(kept) < MAX_MESSAGE_LINES * 9000  # the end of them, bounded


def _lookup_failing_for(bad: str, calls: list[str]) -> Callable[[str, str], str]:
    def lookup(name: str, version: str) -> str:
        calls.append(name)
        if name == bad:
            raise RemoteError(f"cannot reach the page of {name}")
        return f"{name}=={version}"

    return lookup


def test_an_early_look_up_s_error_counts_only_for_a_pin_the_lock_uses() -> None:
    calls: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        ahead: Lookahead[str] = Lookahead(pool, _lookup_failing_for("backtracked", calls), lambda n: n != "direct")
        for name, version in [("used", "1.0"), ("backtracked", "2.0"), ("used", "1.1"), ("direct", "1.0")]:
            ahead.hint(name, version)
        used = ahead.take("Used", "1.0.0")  # names and versions compare canonically
        assert used is not None and used.result() == "used==1.0"
        assert ahead.take("used", "1.1") is None  # one early look-up per package: the first version uv chose
        assert ahead.take("direct", "1.0") is None  # not one of this look-up's packages
        ahead.close()  # the failed one is dropped unseen
        ahead.hint("late", "1.0")
    assert "used" in calls and "late" not in calls and "direct" not in calls  # "backtracked": ran or was cancelled
    with ThreadPoolExecutor(1) as pool:
        ahead = Lookahead(pool, _lookup_failing_for("broken", []), lambda n: True)
        ahead.hint("broken", "1.0")
        taken = ahead.take("broken", "1.0")
        assert taken is not None
        with pytest.raises(RemoteError, match="cannot reach the page of broken"):
            taken.result()


def test_look_ups_hinted_but_not_started_do_not_wait_behind_the_final_ones(env: FakeServer, tmp_path: Path) -> None:
    """With one look-up thread, a final pin whose early look-up is still queued does it itself (no deadlock)."""
    import lockbuild.builder.plan as plan_module

    publish_engine(env, "lmqueue")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_module, "LOOKUP_THREADS", 1)
        done = threading.Event()
        result: list[dict[str, object]] = []

        def run() -> None:
            result.append(lock(recipe(tmp_path, "lmqueue"), tmp_path / "o"))
            done.set()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert done.wait(120)
    assert versions(result[0])["lmqueue-dep"] == "1.1"


def test_the_lock_is_the_same_with_and_without_hints(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lockbuild.resolution.resolve as resolve_module

    publish_engine(env, "lmsame")
    path = recipe(tmp_path, "lmsame")
    with_hints = lock(path, tmp_path / "a", "--fresh-lock")
    monkeypatch.setattr(
        resolve_module, "_SELECTING", resolve_module.re.compile(rb"(?!)(x)(y)")
    )  # a log uv no longer writes
    without = lock(path, tmp_path / "b", "--fresh-lock")
    assert with_hints == without
    assert dt.datetime.fromisoformat(str(with_hints["as_of"]).replace("Z", "+00:00")) == day(6)


def test_a_resolution_with_a_package_exempt_from_the_cut_off_is_never_remembered(
    env: FakeServer, tmp_path: Path
) -> None:
    """exclude-newer-package = false lets a package take releases published any time: uv must see them."""
    publish_engine(env, "lmexempt")
    path = recipe(tmp_path, "lmexempt", extra="exclude-newer-package = { lmexempt-dep = false }\n")
    assert lock(path, tmp_path / "a")["resolution_reused"] is False
    env.publish(*make_wheel("lmexempt-dep", "1.2"), uploaded=day(40))  # after the cut-off: only the exempt see it
    again = lock(path, tmp_path / "b")
    assert again["resolution_reused"] is False and versions(again)["lmexempt-dep"] == "1.2"
    assert not (tmp_path / "cache" / "resolutions").exists() or entries(tmp_path / "cache") == []


def test_a_resolution_that_may_run_a_build_backend_is_never_remembered(env: FakeServer, tmp_path: Path) -> None:
    """Its answer comes from code run here (the sdist's backend), not only from its inputs."""
    from test_builder_process import hostile_sdist

    ran = tmp_path / "backend-ran.json"
    if ("primary", "lmbackend") not in env.projects:
        env.publish("lmbackend-1.0.tar.gz", hostile_sdist("lmbackend", ran), uploaded=day(1))
    memo = ResolutionMemo(tmp_path / "resolutions")
    for attempt in ("first", "second"):
        (tmp_path / attempt).mkdir()
        ran.unlink(missing_ok=True)
        got = compile_lock(
            ["lmbackend==1.0"],
            Target.of(PY, PLATFORM),
            day(6),
            index_url=env.index_url(),
            workdir=tmp_path / attempt,
            cache_dir=tmp_path / "uv-cache",
            sdists_allowed=("lmbackend",),
            memo=memo,
            inherit={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        )
        assert got.reused is False and got.key is None and "lmbackend==1.0" in got.text
    assert not (tmp_path / "resolutions").exists()


def test_the_text_output_says_when_uv_s_resolution_was_remembered(env: FakeServer, tmp_path: Path) -> None:
    publish_engine(env, "lmtext")
    path = recipe(tmp_path, "lmtext")
    outputs = [CliRunner().invoke(main, ["lock", str(path), "--out", str(tmp_path / n)]) for n in ("a", "b")]
    assert all(r.exit_code == 0 for r in outputs)
    assert "remembered" not in outputs[0].stdout
    assert "uv's resolution remembered from an earlier lock" in outputs[1].stdout


def test_a_hint_that_fails_stops_the_hints_not_the_reading() -> None:
    calls: list[str] = []

    def hint(name: str, version: str) -> None:
        calls.append(name)
        raise RuntimeError("the pool is gone")

    log = b"DEBUG Selecting: a==1 [compatible] (a-1.whl)\nDEBUG Selecting: b==1 [compatible] (b-1.whl)\nerror: x\n"
    assert read_uv_stderr(io.BytesIO(log), hint) == "error: x\n"
    assert calls == ["a"]


@pytest.mark.parametrize("attack", ["group-writable", "symlink"])
def test_a_resolutions_directory_another_user_could_write_is_refused(tmp_path: Path, attack: str) -> None:
    """Whoever writes there could choose uv's answer (each pin is still checked, but not which pins)."""
    from lockbuild.errors import FetchError
    from lockbuild.fetch.cache import Cache

    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    if attack == "group-writable":
        (root / "resolutions").mkdir()
        (root / "resolutions").chmod(0o775)
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        (root / "resolutions").symlink_to(tmp_path / "elsewhere")
    why = "is writable by group or others" if attack == "group-writable" else "is a symbolic link"
    with pytest.raises(FetchError, match=f"resolutions {why}"):
        Cache(root).check_owner()


def test_a_resolution_whose_cut_off_is_still_to_come_is_never_remembered(env: FakeServer, tmp_path: Path) -> None:
    """A release's first day gives a cut-off in the future: the index may still gain files before it, which
    a fresh lock then sees (even once that time has passed); a remembered answer would hide them for good."""
    publish_engine(env, "lmsoon")
    memo = ResolutionMemo(tmp_path / "resolutions")
    cut = day(6)
    excluded = [("lmsoon-dep", iso(cut + dt.timedelta(hours=5)))]
    for now, per_package, remembered in [
        (cut - dt.timedelta(hours=3), (), False),  # the cut-off is still to come
        (cut + dt.timedelta(minutes=10), (), False),  # just past: the index's clock may trail ours
        (cut + dt.timedelta(hours=2), excluded, False),  # a package's own cut-off is still to come
        (cut + dt.timedelta(hours=2), (), True),  # settled: remembered, and the next lock reuses it
    ]:
        got = []
        for attempt in ("first", "second"):
            work = tmp_path / f"{now:%H%M}-{len(per_package)}-{attempt}"
            work.mkdir()
            got.append(
                compile_lock(
                    ["lmsoon==1.0"],
                    Target.of(PY, PLATFORM),
                    cut,
                    index_url=env.index_url(),
                    workdir=work,
                    cache_dir=tmp_path / "uv-cache",
                    memo=memo,
                    exclude_newer_package=per_package,
                    now=now,
                    inherit={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
                )
            )
        assert got[1].reused is remembered, (now, per_package)
        assert got[0].text == got[1].text


def test_a_process_uv_leaves_holding_its_stderr_does_not_hang_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build backend (build-on-node) may start a process that keeps uv's stderr open after uv exits: the
    lock ends with uv's time limit, as it did before uv's stderr was read as it came, never waits for ever."""
    import lockbuild.resolution.resolve as resolve_module

    monkeypatch.setattr(resolve_module, "RESOLVE_TIMEOUT", 1)
    monkeypatch.setattr(resolve_module, "READER_GRACE", 0.5)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            resolve_module._run_uv(
                ["sh", "-c", "sleep 6 >&2 & exit 0"], None, {"PATH": os.environ["PATH"]}, tmp_path, None
            )
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), "the lock waited on a pipe held by a process uv left behind"
    assert isinstance(outcome[0], resolve_module.ResolveError) and "did not finish" in outcome[0].message


def test_an_answer_holding_a_percent_encoded_credential_is_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv is given the credentials percent-encoded in its index URL: an answer echoing that URL holds them
    even where neither the user name nor the password appears as given (say, an e-mail address)."""
    import lockbuild.resolution.resolve as resolve_module
    from lockbuild.settings import IndexCredentials

    fake = tmp_path / "uv"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "uv 0.0.1"; exit 0; fi\n'
        'while [ $# -gt 0 ]; do [ "$1" = "--output-file" ] && out="$2"; shift; done\ncat >/dev/null\n'
        'printf "x==1 --hash=sha256:%064d\\n# %s\\n" 0 "$UV_INDEX_URL" > "$out"\n'
    )
    fake.chmod(0o700)
    monkeypatch.setattr(resolve_module, "uv_binary", lambda: str(fake))
    memo = ResolutionMemo(tmp_path / "resolutions")
    (tmp_path / "w").mkdir()
    got = compile_lock(
        ["x==1"],
        Target.of(PY, PLATFORM),
        day(6),
        index_url="https://index.example/simple",
        workdir=tmp_path / "w",
        cache_dir=tmp_path / "uv-cache",
        memo=memo,
        credentials=IndexCredentials("me@corp.example", "p@ss/w:rd"),
        inherit={"PATH": os.environ["PATH"]},
    )
    assert "me%40corp.example:p%40ss%2Fw%3Ard@index.example" in got.text and got.key is not None
    assert memo.get(got.key) is None and not any((tmp_path / "resolutions").glob("*"))


# --------------------------------------------------------------------------- a memory is only a hint
def test_a_package_added_to_the_memory_never_reaches_the_lock(env: FakeServer, tmp_path: Path) -> None:
    """A rewritten CACHE/resolutions entry that pins one more package, a real file on the index with its
    real digest (so every per-pin check passes), is not the closure of the requirements: uv runs afresh."""
    publish_engine(env, "lmadd")
    if ("primary", "lmadd-implant") not in env.projects:
        env.publish(*make_wheel("lmadd-implant", "1.0"), uploaded=day(1))
    implant = env.projects[("primary", "lmadd-implant")][0].sha256
    path = recipe(tmp_path, "lmadd")
    first = lock(path, tmp_path / "a")
    (entry,) = entries(tmp_path / "cache")
    doc = json.loads(entry.read_text())
    doc["text"] += f"lmadd-implant==1.0 \\\n    --hash=sha256:{implant}\n"
    entry.write_text(json.dumps(doc))
    before = len(env.request_headers)
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is False and uv_requests(env, before)
    assert "lmadd-implant" not in versions(second)
    assert "lmadd-implant" not in (tmp_path / "b/1.0-cpu/requirements.txt").read_text()
    first.pop("resolution_reused")
    assert first == second
    assert "lmadd-implant" not in json.loads(entries(tmp_path / "cache")[0].read_text())["text"]  # re-remembered


def test_a_package_taken_out_of_the_memory_is_resolved_afresh(env: FakeServer, tmp_path: Path) -> None:
    publish_engine(env, "lmdrop")
    path = recipe(tmp_path, "lmdrop")
    first = lock(path, tmp_path / "a")
    (entry,) = entries(tmp_path / "cache")
    doc = json.loads(entry.read_text())
    out, skip = [], False
    for line in doc["text"].splitlines(keepends=True):  # the dep's pin and the --hash lines that follow it
        skip = line.startswith("lmdrop-dep") or (skip and line.startswith(" "))
        if not skip:
            out.append(line)
    doc["text"] = "".join(out)
    assert "lmdrop-dep" not in doc["text"] and "lmdrop==1.0" in doc["text"]
    entry.write_text(json.dumps(doc))
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is False
    first.pop("resolution_reused")
    assert first == second


def test_the_closure_follows_markers_and_extras_for_the_target() -> None:
    from lockbuild.sdist.closure import closure_problem

    meta = {
        "eng": b"Name: eng\nVersion: 1.0\nRequires-Dist: dep>=1\nRequires-Dist: winonly; sys_platform == 'win32'\n"
        b"Requires-Dist: extraonly; extra == 'fast'\n",
        "dep": b"Name: dep\nVersion: 1.2\n",
        "winonly": b"Name: winonly\nVersion: 1.0\n",
        "extraonly": b"Name: extraonly\nVersion: 1.0\n",
    }
    env = Target.of(PY, PLATFORM).marker_environment()
    get = meta.__getitem__
    assert closure_problem(["eng==1.0"], {"eng": "1.0", "dep": "1.2"}, get, env) is None
    assert closure_problem(["eng[fast]==1.0"], {"eng": "1.0", "dep": "1.2", "extraonly": "1.0"}, get, env) is None
    why = closure_problem(["eng==1.0"], {"eng": "1.0", "dep": "1.2", "winonly": "1.0"}, get, env)
    assert why is not None and "winonly==1.0, which nothing in the requirements needs" in why
    why = closure_problem(["eng==1.0"], {"eng": "1.0", "dep": "1.2", "extraonly": "1.0"}, get, env)
    assert why is not None and "extraonly" in why
    why = closure_problem(["eng==1.0"], {"eng": "1.0"}, get, env)
    assert why is not None and "dep is required by eng==1.0" in why
    why = closure_problem(["eng==2.0"], {"eng": "1.0", "dep": "1.2"}, get, env)
    assert why is not None and "does not satisfy" in why
    meta["dep"] = b"Name: other\nVersion: 1.2\n"
    why = closure_problem(["eng==1.0"], {"eng": "1.0", "dep": "1.2"}, get, env)
    assert why is not None and "names 'other'" in why


def test_the_closure_reads_pep_658_metadata_where_the_index_publishes_it(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that lists each wheel's METADATA (PEP 658/714, as PyPI does) is asked for that small file,
    taken by its listed sha256 (through the fetcher, like any file), instead of the wheel."""
    import hashlib
    import zipfile

    publish_engine(env, "lmpep")
    original = env._project_page

    def with_metadata(index: str, name: str) -> bytes | None:
        page = original(index, name)
        if page is None or not name.startswith("lmpep"):
            return page
        doc = json.loads(page)
        for f in doc["files"]:
            body = env.files[f"/files/{index}/{f['filename']}"].data
            assert isinstance(body, bytes)
            with zipfile.ZipFile(io.BytesIO(body)) as z:
                meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
            env.add_file(f"/files/{index}/{f['filename']}.metadata", meta)
            f["core-metadata"] = {"sha256": hashlib.sha256(meta).hexdigest()}
        return json.dumps(doc).encode()

    monkeypatch.setattr(env, "_project_page", with_metadata)
    path = recipe(tmp_path, "lmpep")
    first = lock(path, tmp_path / "a")
    before = len(env.requests)
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is True
    asked = env.requests[before:]
    assert any(p.endswith("lmpep-1.0-py3-none-any.whl.metadata") for p in asked), asked
    assert not any(p.endswith(".whl") for p in asked), "the wheels themselves were not needed"
    first.pop("resolution_reused")
    assert first == second


def test_a_remembered_resolution_is_not_checked_by_downloading_wheels_beyond_the_budget(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the index publishes no METADATA files and the cache lacks the wheels, checking a remembered
    answer means downloading the wheels (vLLM's: 4 GB); beyond the budget uv resolves afresh, downloading
    none, and the lock is the same. Once the wheels are in the cache (a rebuild), the memory is used."""
    import lockbuild.builder.plan as plan

    monkeypatch.setattr(plan, "CHECK_DOWNLOAD_BUDGET", 0)
    publish_engine(env, "lmbudget")
    path = recipe(tmp_path, "lmbudget")
    first = lock(path, tmp_path / "a")
    before = len(env.request_headers)
    second = lock(path, tmp_path / "b")
    assert second.pop("resolution_reused") is False and uv_requests(env, before)
    ours = [p for p, h in env.request_headers[before:] if not h.get("user-agent", "").startswith("uv/")]
    assert not any(p.endswith(".whl") for p in ours), f"lockbuild downloaded no wheel to check it: {ours}"
    first.pop("resolution_reused")
    assert first == second
    r = CliRunner().invoke(main, ["fetch", str(path), "--out", str(tmp_path / "f")], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    middle = len(env.request_headers)
    assert lock(path, tmp_path / "c")["resolution_reused"] is True and uv_requests(env, middle) == []
