"""The only place that runs ``uv pip compile``: requirements in, a hashed lock's text out.

Resolution runs no code from the index: wheels only (``--only-binary :all:``); a ``build-on-node`` sdist's
metadata is given in a ``uv.toml`` (``sdist/metadata.py``), and such a resolution runs in the sandbox all the
same. uv's environment is an allow-list; the index's credentials reach uv only in ``UV_INDEX_URL``."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from lockbuild import fsio
from lockbuild.errors import ResolveError, certificate_tip
from lockbuild.proc.uvtool import clean_env, uv_binary, uv_version
from lockbuild.recipe import SecondIndex
from lockbuild.resolution.memo import ResolutionMemo, resolution_key
from lockbuild.sdist.metadata import SdistMetadata, uv_config
from lockbuild.sdist.uvsandbox import sandboxed_compile
from lockbuild.settings import IndexCredentials
from lockbuild.target import Target
from lockbuild.times import iso, parse_time

RESOLVE_TIMEOUT = 1800
READER_GRACE = 5  # seconds to wait, once uv is gone, for the end of its stderr after a failure
# A cut-off this close to now (or later) may still gain files: the index's clock may trail ours, and a
# file stamped before the cut-off may be uploaded after we looked. Only an answer whose every cut-off was
# this far in the past when uv gave it is remembered (memo.py).
SETTLED = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Resolution:
    format: Literal["requirements.txt", "pylock.toml"]
    text: str
    argv: tuple[str, ...]
    reused: bool = False  # remembered from an earlier run with the same inputs (memo.py), uv not run
    key: str | None = None  # the inputs' key, when remembering was asked for


def uv_index_name(index: SecondIndex) -> str:
    """The name uv knows an extra index by in the resolution project ("lockbuild-second" for ``index``)."""
    return f"lockbuild-{index.name}" if index.name == "second" else f"lockbuild-extra-{index.name}"


def second_index_project(requirements: Sequence[str], indexes: Sequence[SecondIndex]) -> str:
    """A pyproject.toml in which each extra index is explicit and named only for its own packages."""
    q = json.dumps
    deps = "".join(f"    {q(r)},\n" for r in requirements)
    blocks = "".join(
        f"[[tool.uv.index]]\nname = {q(uv_index_name(ix))}\nurl = {q(ix.url)}\nexplicit = true\n\n" for ix in indexes
    )
    sources = "".join(f"{q(name)} = {{ index = {q(uv_index_name(ix))} }}\n" for ix in indexes for name in ix.packages)
    return (
        '[project]\nname = "lockbuild-resolve"\nversion = "0"\n'
        f"dependencies = [\n{deps}]\n\n"
        f"{blocks}"
        f"[tool.uv.sources]\n{sources}"
    )


_NETWORK_SIGNS = ("Failed to fetch", "dns error", "Connection refused", "error sending request", "timed out")


def _resolve_tip(stderr: str) -> str:
    cert = certificate_tip(stderr)
    if cert is not None:
        return cert
    if any(sign in stderr for sign in _NETWORK_SIGNS):
        return "uv could not reach the index: check the network, the proxy settings and LOCKBUILD_INDEX_URL."
    return (
        "Check the requirements against the index as of that date (a version may be newer than the "
        "cut-off), or set as-of on the build."
    )


_NEEDS_BUILD = re.compile(r"Wheels are required for `([^`]+)`")
# "llguidance==1.7.6 has no usable wheels", "llguidance{MARKERS}>=1.7.0,<=1.7.6 has no usable wheels"
_NO_USABLE = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\{[^}]*\})?(?:==|>=[^,\s]+,<=)([0-9][A-Za-z0-9.+!_-]*) has no usable"
)


_NO_PLATFORM_WHEEL = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\{[^}]*\})?==([0-9][A-Za-z0-9.+!_-]*) has no wheels with a matching platform tag"
)


def _needs_build_error(stderr: str, target: Target) -> ResolveError | None:
    """A clear refusal when uv would have had to build an sdist that the build does not allow, or found
    no wheel of a release for the build's platform at all."""
    names = sorted(set(_NEEDS_BUILD.findall(stderr)))
    if not names:
        found = sorted(set(_NO_PLATFORM_WHEEL.findall(stderr)))
        if not found:
            return None
        shown = ", ".join(f"{n} {v}" for n, v in found)
        return ResolveError(
            f"{shown} has no wheel for Python {target.python} on {target.platform}.",
            tip="Require a version that publishes a wheel for this platform, or build for a platform it has one for.",
            needs_wheel=tuple(found),
        )
    shown = ", ".join(names)
    return ResolveError(
        f"{shown} has no wheel for Python {target.python} on {target.platform}, only a source distribution. "
        "Locking it would run its build backend (code from the index) on the builder, with the builder's "
        "files in reach; lockbuild refuses that.",
        tip=f"Require a version of {shown} that publishes a wheel for this target, or name it in the build's "
        "build-on-node list: it then comes as an sdist with its build dependencies locked by hash, and is built "
        "either here, with no network, when its wheel runs on the node (pure Python, or this platform), or "
        "else by the node, offline, from those bundled build dependencies.",
        needs_wheel=tuple((n, dict(_NO_USABLE.findall(stderr)).get(n, "")) for n in names),
    )


def _with_credentials(index_url: str, credentials: IndexCredentials) -> str:
    """The index URL with its credentials, for uv's environment (never its argv, which other users can
    read). Not a netrc: uv answers a 401 from ANY port or scheme of a netrc host with the netrc's
    password, so an index page linking a plain-http file on the index's host would hand the password to
    a network attacker; credentials in the index URL are kept to its origin (scheme, host and port)."""
    parts = urlsplit(index_url)
    userinfo = f"{quote(credentials.username, safe='')}:{quote(credentials.password, safe='')}"
    return urlunsplit((parts.scheme, f"{userinfo}@{parts.netloc}", parts.path, parts.query, parts.fragment))


def _secret_forms(credentials: IndexCredentials) -> tuple[str, ...]:
    """The credentials as uv's output could show them: as given, percent-encoded (as in UV_INDEX_URL),
    and as the Basic authorization value."""
    raw = (credentials.username, credentials.password)
    encoded = tuple(quote(v, safe="") for v in raw) + tuple(quote(v) for v in raw)
    return (*raw, *encoded, credentials.authorization().removeprefix("Basic "))


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in kept[-lines:])


# uv's resolver logs each decision as "DEBUG Selecting: NAME==VERSION [...] (file)" when RUST_LOG asks for
# its debug events (no -v: uv's own output stays as it was). Only a hint for starting index look-ups early:
# if the format changes, nothing is started early and the lock is the same.
UV_LOG_FILTER = "uv_resolver=debug"
_SELECTING = re.compile(rb"DEBUG Selecting: ([A-Za-z0-9][A-Za-z0-9._-]{0,199})==([A-Za-z0-9.+!_-]{1,200}) ")
_LOG_LEVELS = (b"TRACE ", b"DEBUG ", b"INFO ", b"WARN ", b"ERROR ")
MAX_MESSAGE_LINES = 400  # uv's messages (not its log) kept for an error: the end of them
MAX_LINE = 8192  # a longer line is kept in pieces


def read_uv_stderr(stream: IO[bytes], on_select: Callable[[str, str], None] | None) -> str:
    """uv's messages from its stderr, without its log lines, bounded (the last MAX_MESSAGE_LINES lines);
    ``on_select(name, version)`` for each decision the log shows."""
    kept: deque[bytes] = deque(maxlen=MAX_MESSAGE_LINES)
    while line := stream.readline(MAX_LINE):
        if line.startswith(_LOG_LEVELS):
            m = _SELECTING.match(line)
            if m is not None and on_select is not None:
                try:
                    on_select(m[1].decode("ascii"), m[2].decode("ascii"))
                except Exception:  # a hint that fails ends the hints, never the reading (uv would block)
                    on_select = None
            continue
        kept.append(line)
    return b"".join(kept).decode("utf-8", errors="replace")


def _run_uv(
    argv: Sequence[str],
    stdin: str | None,
    env: Mapping[str, str],
    cwd: Path,
    on_select: Callable[[str, str], None] | None,
) -> tuple[int, str]:
    """Run uv, its stderr read as it comes (log lines to ``on_select``, messages kept); (exit code, messages)."""
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(env), cwd=cwd
        )
    except OSError as exc:
        raise ResolveError(f"cannot run uv at {argv[0]}: {exc.strerror}") from None
    stdin_pipe, stderr = proc.stdin, proc.stderr
    if stdin_pipe is None or stderr is None:  # both were asked for as pipes
        proc.kill()
        proc.wait()
        raise ResolveError(f"cannot talk to uv at {argv[0]}: expected pipes to its stdin and stderr, found none")
    messages: list[str] = []

    def read() -> None:
        with stderr:  # closed by the reader, when it ends (it may outlive this call: see below)
            messages.append(read_uv_stderr(stderr, on_select))

    reader = threading.Thread(
        target=read,
        name="lockbuild-uv-stderr",
        daemon=True,
    )
    reader.start()
    try:
        with contextlib.suppress(BrokenPipeError):  # uv may exit (an argument error) before reading it
            stdin_pipe.write((stdin or "").encode("utf-8"))
        with contextlib.suppress(BrokenPipeError):
            stdin_pipe.close()
        # uv's stderr ends when uv does: wait on the reader (no polling), then reap uv.
        deadline = time.monotonic() + RESOLVE_TIMEOUT
        reader.join(timeout=RESOLVE_TIMEOUT)
        if reader.is_alive():  # uv runs on, or a process it started (a build backend) holds its stderr
            raise subprocess.TimeoutExpired(argv, RESOLVE_TIMEOUT)
        code = proc.wait(timeout=max(0.001, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ResolveError(
            f"uv pip compile did not finish within {RESOLVE_TIMEOUT} s (or a process it started kept its output open)."
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # Bounded: a process uv started may hold the pipe open after uv is gone; the (daemon) reader then
        # ends when it does, and this call does not wait for it.
        reader.join(timeout=READER_GRACE)
    return code, messages[0] if messages else ""


@functools.lru_cache(maxsize=4)
def _uv_version(binary: str) -> str:
    return uv_version(binary)


def compile_lock(
    requirements: Sequence[str],
    target: Target,
    as_of: dt.datetime,
    *,
    index_url: str,
    indexes: Sequence[SecondIndex] = (),
    workdir: Path,
    cache_dir: Path,
    inherit: Mapping[str, str] | None = None,
    credentials: IndexCredentials | None = None,
    sdists_allowed: Sequence[str] = (),
    sdist_metadata: Sequence[SdistMetadata] = (),
    exclude_newer_package: Sequence[tuple[str, str | None]] = (),
    timed: Collection[str] = (),
    memo: ResolutionMemo | None = None,
    reuse: bool = True,
    on_select: Callable[[str, str], None] | None = None,
    now: dt.datetime | None = None,
) -> Resolution:
    """Resolve ``requirements`` for the target as the index stood at ``as_of``, with every hash.

    ``index_url`` carries no credentials; ``credentials`` are handed to uv in its environment. Only the
    packages in ``sdists_allowed`` may come as sdists; uv is given ``sdist_metadata`` for the versions
    read, and "no dependencies" for every other version of them, so it runs no build backend (``sdistlock``
    repeats the resolution until every sdist locked is one read); every other package must have a wheel
    for the target. The packages of ``indexes`` are exempt from the cut-off
    (their index publishes no upload times; the recipe's == pins hold them), except those in ``timed``,
    whose index gives upload times for the pinned release: the cut-off holds them as it does the primary's.

    With ``memo``, the answer is remembered by its inputs, and with ``reuse`` an answer remembered earlier
    is returned without running uv (``Resolution.reused``); the caller must still check every pin against
    the live index, and resolve afresh (``reuse=False``) if a check fails. A resolution that may run a
    backend's answer (``sdists_allowed``) is never remembered: it comes from code run here; nor one
    with a package exempt from the cut-off (an extra index's untimed package, ``exclude-newer-package``
    false): its candidates can grow at any time; nor one whose cut-off (``as_of``, or an
    ``exclude_newer_package`` time) is later than ``now`` less SETTLED: the index can still gain files
    before it (a release's first day gives a cut-off in the future), which a remembered answer would hide
    even once that time has passed.
    ``on_select(name, version)`` is called (from another thread) as uv's log shows it choosing a version.
    """
    out = workdir / ("pylock.toml" if indexes else "requirements.txt")
    # The index's credentials: in uv's environment as part of the index URL (uv keeps them to its origin).
    argv = [
        uv_binary(),
        "pip",
        "compile",
        "--python-version",
        target.python,
        "--python-platform",
        target.platform,
        "--exclude-newer",
        iso(as_of),
        *(["--index-url", index_url] if credentials is None else []),  # with credentials: UV_INDEX_URL below
        "--generate-hashes",
        "--no-header",
        "--quiet",
        "--output-file",
        str(out),
        "--only-binary",
        ":all:",
    ]
    for name in sdists_allowed:
        argv += ["--no-binary", name]
    if sdists_allowed:  # their metadata, so that uv runs no build backend (sdistmeta.py)
        config = workdir / "uv.toml"
        fsio.write_new(config, uv_config(sdist_metadata, sdists_allowed).encode("utf-8"))
        argv += ["--config-file", str(config)]
    for name, when in exclude_newer_package:  # the recipe's per-package cut-off (None: none at all)
        argv += ["--exclude-newer-package", f"{name}={when or 'false'}"]
    stdin: str | None
    project_text: str | None = None
    if not indexes:
        argv.append("-")
        stdin = "".join(r + "\n" for r in requirements)
    else:
        project = workdir / "pyproject.toml"
        project_text = second_index_project(requirements, indexes)
        fsio.write_new(project, project_text.encode("utf-8"))
        argv += ["--format", "pylock.toml"]
        for name in (name for ix in indexes for name in ix.packages if name not in timed):
            # Its index publishes no upload times for it; the recipe pins these with == instead.
            argv += ["--exclude-newer-package", f"{name}=false"]
        argv.append(str(project))
        stdin = None
    lock_format: Literal["requirements.txt", "pylock.toml"] = "pylock.toml" if indexes else "requirements.txt"
    # Remembered only when every file uv may choose is held by a cut-off (a package exempt from one can gain
    # files or releases at any time), that cut-off has passed (SETTLED), and no build backend runs (its
    # answer comes from code run here).
    exempt = any(when is None for _, when in exclude_newer_package) or any(
        name not in timed for ix in indexes for name in ix.packages
    )
    cut_offs = [as_of, *(parse_time(when) for _, when in exclude_newer_package if when is not None)]
    settled = (now or dt.datetime.now(dt.UTC)) - SETTLED
    exempt = exempt or any(c is None or c.tzinfo is None or c > settled for c in cut_offs)
    key = None
    if memo is not None and not sdists_allowed and not exempt:
        fixed = {str(out): "<output>", str(workdir / "pyproject.toml"): "<project>"}
        key = resolution_key(
            uv_version=_uv_version(argv[0]),
            argv=[fixed.get(a, a) for a in argv[1:]],
            stdin=stdin,
            project=project_text,
            index_url=index_url,
            authenticated=credentials is not None,
        )
        remembered = memo.get(key) if reuse else None
        if remembered is not None and remembered.format == lock_format:
            return Resolution(lock_format, remembered.text, tuple(argv), reused=True, key=key)
    env = clean_env(cache_dir, inherit=inherit or {})
    if credentials is not None:
        env["UV_INDEX_URL"] = _with_credentials(index_url, credentials)
    if on_select is not None:
        env["RUST_LOG"] = UV_LOG_FILTER
    if sdists_allowed:  # sdists, their metadata given: uv runs no backend, and runs in the sandbox all the same
        run_argv, run_env = sandboxed_compile(argv, env, workdir, target)
    else:  # wheels only (--only-binary :all:): uv runs no code from the index
        run_argv, run_env = argv, env
    code, stderr = _run_uv(run_argv, stdin, run_env, workdir, on_select)
    if code != 0:
        refused = _needs_build_error(stderr, target)
        if refused is not None:
            raise refused
        tls = " (the index's TLS certificate could not be verified)" if certificate_tip(stderr) else ""
        raise ResolveError(
            f"uv could not resolve the requirements for Python {target.python} on {target.platform} "
            f"as of {iso(as_of)}{tls}:\n{_tail(stderr)}",
            tip=_resolve_tip(stderr),
        )
    text = out.read_text(encoding="utf-8")
    if memo is not None and key is not None:
        held = () if credentials is None else _secret_forms(credentials)
        memo.put(key, lock_format, text, secrets_held=held)
    return Resolution(lock_format, text, tuple(argv), key=key)
