"""``uv pip compile`` inside the sandbox, for a resolution with sdists: the network kept (uv must reach the
index), and of this machine only lockbuild's uv, a system Python, the CA settings and the compile's own
work directory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from lockbuild.proc import sandbox
from lockbuild.target import Target

SANDBOX_WORK = Path("/lock")  # the compile's private work directory, as the sandbox sees it


def sandboxed_compile(
    argv: Sequence[str], env: Mapping[str, str], workdir: Path, target: Target
) -> tuple[list[str], dict[str, str]]:
    """``uv pip compile`` inside the sandbox, for a resolution with sdists (``--no-binary``). uv is given their
    metadata (the work directory's uv.toml), so no build backend runs in it; should one, it would meet
    the sandbox: the network kept (uv must reach the index) but none of the builder's files. Read-only,
    lockbuild's uv, a system Python X.Y and the CA settings of the user's environment (``SSL_CERT_FILE``,
    ``SSL_CERT_DIR``, ``UV_NATIVE_TLS``: a TLS-inspecting proxy's or a private index's CA); writable, only
    this compile's private work directory (the requirements, the uv.toml, the output). uv's cache there is
    a throw-away one."""
    from lockbuild.sdist.prebuild import SANDBOX_UV, build_env, find_host_python, uv_bind

    sandbox.check_available()
    python = find_host_python(target.python, env)
    inner = build_env(offline=False, extra_path=[python.executable.parent] if python is not None else [])
    for name in ("UV_INDEX_URL", "RUST_LOG", *PROXY_NAMES, *CA_NAMES):
        if name in env:
            inner[name] = env[name]
    binds = [uv_bind(), sandbox.Bind(workdir, SANDBOX_WORK, writable=True), *ca_binds(env)]
    binds += python.binds if python is not None else ()
    spec = sandbox.Spec(binds=tuple(binds), env=inner, cwd=SANDBOX_WORK, network=True)
    command = [str(SANDBOX_UV), *(_inside(a, workdir) for a in argv[1:])]
    return sandbox.argv(spec, command), {"PATH": sandbox.BWRAP_PATH}


PROXY_NAMES = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
)
CA_NAMES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_NATIVE_TLS")
_SEEN_IN_SANDBOX = ("/usr", "/etc/ssl", "/etc/ca-certificates")  # already there, read-only


def ca_binds(env: Mapping[str, str]) -> list[sandbox.Bind]:
    """The CA bundle (``SSL_CERT_FILE``) and directory (``SSL_CERT_DIR``, colon-separated) the environment
    names, each bound read-only at its own path where it is an absolute path to a file or directory that
    the sandbox does not already show."""
    paths = [env.get("SSL_CERT_FILE", ""), *env.get("SSL_CERT_DIR", "").split(":")]
    out: list[sandbox.Bind] = []
    for raw in dict.fromkeys(p for p in paths if p):
        path = Path(raw)
        if not path.is_absolute() or "\0" in raw or any(path.is_relative_to(d) for d in _SEEN_IN_SANDBOX):
            continue
        if path.is_file() or path.is_dir():
            out.append(sandbox.Bind(path, path))
    return out


def _inside(arg: str, workdir: Path) -> str:
    """An argument naming a path in the work directory, as the sandbox sees it."""
    w = str(workdir)
    if arg == w or arg.startswith(w + "/"):
        return str(SANDBOX_WORK) + arg[len(w) :]
    return arg
