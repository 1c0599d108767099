"""How lockbuild runs uv: which binary, and an environment no user or system configuration reaches.

uv's environment is an allow-list, never the parent's minus a few names (locking can run an sdist's build
backend; the installer runs uv on a node): a child sees only what it needs to find programs, write temporary
files and reach the site's proxy, never LOCKBUILD_KEY_PASSWORD, GITHUB_TOKEN or any other secret."""

from __future__ import annotations

import os
import subprocess
import sysconfig
import threading
from collections.abc import Mapping
from pathlib import Path

from lockbuild.errors import LockbuildError

# What a child process may inherit: finding programs, a home and a temp dir, the locale, and how to reach
# the network (proxies, CA certificates). Nothing else, whatever its name.
CHILD_ALLOWED = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "UV_NATIVE_TLS",
    }
)


def child_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` (the CLI passes ``os.environ`` once, into the settings)."""
    return {k: v for k, v in environ.items() if k in CHILD_ALLOWED}


def clean_env(
    cache_dir: Path,
    *,
    inherit: Mapping[str, str],
    offline: bool = False,
    netrc: Path | None = None,
) -> dict[str, str]:
    """The environment uv runs in: the allow-listed variables of ``inherit`` (the environment the CLI
    read once), no uv.toml or pip.conf, its own cache, and ``netrc`` for the index's credentials."""
    env = child_environ(inherit)
    env["UV_NO_CONFIG"] = "1"
    env["UV_CACHE_DIR"] = str(cache_dir)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["PIP_CONFIG_FILE"] = os.devnull
    env["NO_COLOR"] = "1"
    # No ~/.netrc: uv answers a 401 from any port or scheme of a netrc host with its password (plain
    # http included); the index's credentials come scoped to its origin instead (resolution/resolve.py).
    env["NETRC"] = str(netrc) if netrc is not None else os.devnull
    if offline:
        env["UV_OFFLINE"] = "1"
    return env


_FOUND: str | None = None
_FINDING = threading.Lock()


def uv_binary() -> str:
    """The uv that came with lockbuild's own installation (the ``uv`` package), found once per process.

    Finding it reads ``sysconfig.get_config_vars()``, whose first initialisation is not thread-safe on
    Python 3.11: a second thread can see the half-filled table (``EXE`` missing) and fail with
    ``TypeError: can only concatenate str (not "NoneType") to str`` in ``uv/_find_uv.py`` (a
    lock's uv-wheel look-up runs on a background thread while the main thread starts uv). So the look-up
    is made under a lock and kept; the builder's commands call this before they start any thread."""
    global _FOUND
    found = _FOUND
    if found is not None:
        return found
    with _FINDING:
        if _FOUND is None:
            try:
                from uv import find_uv_bin
            except ImportError:  # pragma: no cover - uv is a dependency
                raise LockbuildError("the uv package is not installed; expected it beside lockbuild.") from None
            sysconfig.get_config_vars()  # the whole table, filled here, under the lock
            _FOUND = str(find_uv_bin())
        return _FOUND


def uv_version(binary: str) -> str:
    """The version a uv binary reports, e.g. "0.13.9"."""
    try:
        env = clean_env(Path(os.devnull), inherit={})  # --version needs nothing from the environment
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False, env=env)
    except OSError as exc:
        raise LockbuildError(f"cannot run uv at {binary}: {exc.strerror}") from None
    parts = proc.stdout.split()
    if proc.returncode != 0 or len(parts) < 2:
        raise LockbuildError(f"{binary} --version failed; expected 'uv X.Y.Z', found {proc.stdout.strip()!r}")
    return parts[1]
