"""The builder's settings: read once, in the CLI, from flags and the environment, then passed down.

No library module reads ``os.environ``; it receives a frozen ``Settings``. IndexCredentials are parsed out of
``LOCKBUILD_INDEX_URL`` here, so every URL downstream is credential-free; they travel only as an
Authorization header to their own host (``auth_for``). The variables are DESIGN.md §5's contract names."""

from __future__ import annotations

import base64
import netrc
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lockbuild.errors import LockbuildError
from lockbuild.proc.uvtool import child_environ
from lockbuild.wire.rules import credential_problem, credential_tip
from lockbuild.wire.urls import (
    INSECURE_ENV,
    check_transport,
    is_loopback,
    is_secure,
    origin,
    public,
    split_credentials,
)

DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_GITHUB_API = "https://api.github.com"
DEFAULT_GITHUB_DOWNLOAD = "https://github.com"
TOKEN_USER = "__token__"  # noqa: S105 - the user name sent with LOCKBUILD_INDEX_TOKEN when the URL names none


DEFAULT_HUB_ENDPOINT = "https://huggingface.co"  # HF_ENDPOINT unset
MODULEFILES_ENV = "LOCKBUILD_MODULEFILES"  # install's and image's --modulefiles DIR, where the flag is not given
DEFAULT_OSV_URL = "https://api.osv.dev"  # LOCKBUILD_OSV_URL unset


@dataclass(frozen=True)
class IndexCredentials:
    """A user name and password for one index host; the password is never shown by repr."""

    username: str
    password: str = field(repr=False)

    def authorization(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class Settings:
    index_url: str
    github_api: str
    github_download: str
    cache_dir: Path
    index_credentials: IndexCredentials | None = field(default=None, repr=False)
    github_token: str | None = field(default=None, repr=False)
    hf_endpoint: str = "https://huggingface.co"  # fetch/hub.py::hub_endpoint (https, or http to loopback)
    hf_token: str | None = field(default=None, repr=False)
    allow_insecure_http: bool = False
    warnings: tuple[str, ...] = ()
    child_environ: tuple[tuple[str, str], ...] = ()  # the allow-listed variables a child may inherit
    osv_url: str | None = None  # LOCKBUILD_OSV_URL: the OSV service asked at build time (None: not asked)
    fresh_lock: bool = False  # --fresh-lock: run uv even when its answer for the same inputs is remembered

    def check(self, url: str, *, what: str) -> None:
        """Refuse ``url`` unless it is https, loopback http, or http under the explicit opt-in."""
        check_transport(url, what=what, allow_insecure=self.allow_insecure_http)

    def auth_for(self, url: str) -> str | None:
        """The Authorization header for a request to ``url``: the GitHub token to the API and download
        bases, the index credentials to the index's host; none over plain http off this machine."""
        if not is_secure(url):
            return None
        where = origin(url)
        path = url.split("?", 1)[0]
        for base in (self.github_api, self.github_download):
            if self.github_token and origin(base) == where and path.startswith(base + "/"):
                return f"Bearer {self.github_token}"
        if self.index_credentials is not None and origin(self.index_url) == where:
            return self.index_credentials.authorization()
        if self.hf_token and origin(self.hf_endpoint) == where:
            return f"Bearer {self.hf_token}"
        return None

    def secrets(self) -> tuple[str, ...]:
        """Every secret these settings hold (for tests and for scrubbing a child's output)."""
        out = [s for s in (self.github_token, self.hf_token) if s]
        if self.index_credentials is not None:
            out.append(self.index_credentials.password)
            out.append(self.index_credentials.authorization().removeprefix("Basic "))  # the password, encoded
        return tuple(out)


class SettingsError(LockbuildError):
    """A setting in the environment or on the command line is unusable."""

    default_tip = "Fix the variable in the environment, or the option, that the message names."


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _base(environ: Mapping[str, str], name: str, default: str) -> str:
    value = environ.get(name) or default
    if any(c.isspace() or ord(c) < 32 for c in value) or not value.startswith(("http://", "https://")):
        raise SettingsError(
            f"{name}: expected an http(s) URL without spaces or control characters, found {public(value)[:200]!r}."
        )
    return value.rstrip("/")


def _credential(name: str, value: str | None, *, as_is: bool) -> str | None:
    """``value`` (None when unset or empty), refused when it cannot travel in a header: the message names
    ``name`` and never the value (``wire/rules.py::credential_problem``)."""
    if not value:
        return None
    why = credential_problem(name, value, as_is=as_is)
    if why is not None:
        raise SettingsError(why, tip=credential_tip(name))
    return value


def _netrc_credentials(environ: Mapping[str, str], home: Path, host: str) -> IndexCredentials | None:
    path = Path(environ["NETRC"]) if environ.get("NETRC") else home / ".netrc"
    if not path.is_file():
        return None
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (netrc.NetrcParseError, OSError) as exc:
        raise SettingsError(
            f"cannot read {path} for the index's credentials: {exc.__class__.__name__}.",
            tip="Fix or remove that file, or give the credentials with LOCKBUILD_INDEX_TOKEN.",
        ) from None
    if entry is None or not entry[2]:
        return None
    where = f"{path} (its entry for {host})"
    return IndexCredentials(
        _credential(where, entry[0], as_is=False) or TOKEN_USER, _credential(where, entry[2], as_is=False) or ""
    )


def load(
    environ: Mapping[str, str],
    *,
    home: Path,
    allow_insecure_http: bool = False,
    cache_dir: Path | None = None,
) -> Settings:
    """Settings from an environment mapping (the CLI passes ``os.environ``) and the command's flags."""
    index_raw = _base(environ, "LOCKBUILD_INDEX_URL", DEFAULT_INDEX)
    index_url, user, password = split_credentials(index_raw)
    github_api = public(_base(environ, "LOCKBUILD_GITHUB_API", DEFAULT_GITHUB_API))
    github_download = public(_base(environ, "LOCKBUILD_GITHUB_DOWNLOAD", DEFAULT_GITHUB_DOWNLOAD))
    insecure = allow_insecure_http or _truthy(environ.get(INSECURE_ENV))
    token = _credential("LOCKBUILD_INDEX_TOKEN", environ.get("LOCKBUILD_INDEX_TOKEN"), as_is=False)
    user = _credential("LOCKBUILD_INDEX_URL (its user name)", user, as_is=False)
    password = password and _credential("LOCKBUILD_INDEX_URL (its password)", password, as_is=False)
    creds: IndexCredentials | None
    if password is not None:
        creds = IndexCredentials(user or TOKEN_USER, password)
    elif token is not None:
        creds = IndexCredentials(user or TOKEN_USER, token)
    else:
        creds = _netrc_credentials(environ, home, origin(index_url)[1])
    warnings: list[str] = []
    for name, url in (
        ("LOCKBUILD_INDEX_URL", index_url),
        ("LOCKBUILD_GITHUB_API", github_api),
        ("LOCKBUILD_GITHUB_DOWNLOAD", github_download),
    ):
        check_transport(url, what=name, allow_insecure=insecure)
        scheme, host, _ = origin(url)
        if scheme == "http" and not is_loopback(host):
            warnings.append(
                f"INSECURE: {name} is plain http to {host} ({url}); anyone on the network path can change "
                "what is locked and fetched. No credentials are sent to it."
            )

    if cache_dir is None:
        explicit = environ.get("LOCKBUILD_CACHE_DIR")
        base = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
        cache_dir = Path(explicit) if explicit else base / "lockbuild"
    return Settings(
        index_url=index_url,
        github_api=github_api,
        github_download=github_download,
        cache_dir=cache_dir,
        index_credentials=creds,
        github_token=_credential("GITHUB_TOKEN", environ.get("GITHUB_TOKEN"), as_is=True),
        hf_endpoint=hub_endpoint(environ),
        osv_url=osv_url(environ),
        hf_token=_credential("HF_TOKEN", environ.get("HF_TOKEN"), as_is=True),
        allow_insecure_http=insecure,
        warnings=tuple(warnings),
        child_environ=tuple(sorted(child_environ(environ).items())),
    )


def _has_control_character(text: str) -> bool:
    return not (text.isascii() and text.isprintable()) and any(unicodedata.category(c).startswith("C") for c in text)


def osv_url(environ: Mapping[str, str]) -> str | None:
    """``LOCKBUILD_OSV_URL`` (default ``https://api.osv.dev``), without a trailing slash: https, or http to
    this machine only (no opt-in: an advisory service's answer decides what a security officer reads);
    ``none`` turns the look-up off (None)."""
    value = environ.get("LOCKBUILD_OSV_URL") or DEFAULT_OSV_URL
    if value.strip().lower() == "none":
        return None
    parts = urlsplit(value)
    if _has_control_character(value) or " " in value or not parts.hostname or "@" in parts.netloc or parts.query:
        raise SettingsError(
            f"LOCKBUILD_OSV_URL: expected the base URL of an OSV service such as {DEFAULT_OSV_URL}, or none; "
            f"found {public(value)[:200]!r}.",
            tip="Unset LOCKBUILD_OSV_URL to ask osv.dev, set it to your mirror's base URL, or to none.",
        )
    check_transport(value, what="LOCKBUILD_OSV_URL", allow_insecure=False)
    return value.rstrip("/")


def hub_endpoint(environ: Mapping[str, str]) -> str:
    """``HF_ENDPOINT`` (default ``https://huggingface.co``), without a trailing slash: https, or plain
    http to this machine only (a test's fake Hub); no credentials, query or fragment in it."""
    value = environ.get("HF_ENDPOINT") or DEFAULT_HUB_ENDPOINT
    parts = urlsplit(value)
    if (
        _has_control_character(value)
        or " " in value
        or not parts.hostname
        or "@" in parts.netloc
        or parts.query
        or parts.fragment
        or value.endswith("?")
    ):
        raise SettingsError(
            f"HF_ENDPOINT: expected an http(s) URL of a Hugging Face Hub such as {DEFAULT_HUB_ENDPOINT}, without "
            f"credentials, query or spaces; found {public(value)[:200]!r}.",
            tip="Unset HF_ENDPOINT to use the Hub, or set it to your mirror's base URL (give HF_TOKEN for a token).",
        )
    check_transport(value, what="HF_ENDPOINT", allow_insecure=False)  # also refuses a scheme but http(s)
    return value.rstrip("/")


def modulefiles_dir(given: Path | None, environ: Mapping[str, str]) -> Path | None:
    """``--modulefiles DIR``, else ``LOCKBUILD_MODULEFILES`` (unset or empty: no module files)."""
    if given is not None:
        return given
    value = environ.get(MODULEFILES_ENV) or ""
    if not value:
        return None
    if _has_control_character(value):
        raise SettingsError(
            f"{MODULEFILES_ENV}: expected a folder path, found {value[:200]!r}.",
            tip=f"Set {MODULEFILES_ENV} to the folder your users `module use`, or unset it.",
        )
    return Path(value)
