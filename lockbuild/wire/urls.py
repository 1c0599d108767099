"""URL rules for the builder: credentials parsed out once, plain http only on loopback.

Pure functions, no I/O. A URL that is recorded (lock, manifest, SBOM, --json) or printed never
carries userinfo: ``public`` strips it, and ``split_credentials`` is how settings take it out at the
boundary so that it travels only as an Authorization header (see ``lockbuild.fetch.http``).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from lockbuild.errors import RemoteError

INSECURE_OPT_IN = "--allow-insecure-http"
INSECURE_ENV = "LOCKBUILD_ALLOW_INSECURE_HTTP"


class InsecureTransportError(RemoteError):
    """A URL would be fetched over plain http from a host that is not this machine."""

    default_tip = "Use an https address, or pass --allow-insecure-http if plain http is deliberate."


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and the name localhost itself: traffic that never leaves this machine. Not
    ``*.localhost`` nor ``localhost.`` (a resolver without RFC 6761's rule asks DNS for them, and a network
    attacker answers), nor a name such as ``127.0.0.1.nip.io`` or ``localhost.evil.com``."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without userinfo, user, password); user and password are percent-decoded, None when absent."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, unquote(user) or None, unquote(password) if sep else None


def public(url: str) -> str:
    """``url`` as it may be recorded or shown: without userinfo."""
    return split_credentials(url)[0]


# Query or fragment parameters that carry a credential in a presigned or token URL. Matched on the
# lower-cased name: exact names, prefixes (AWS SigV4 ``X-Amz-*``, Google's ``X-Goog-*``) and parts of a
# name (``hf_token``, ``client_secret``, ``X-Goog-Signature``).
_SECRET_NAMES = frozenset(
    {
        "sig",
        "signature",
        "token",
        "key",
        "access_token",
        "id_token",
        "refresh_token",
        "auth",
        "authorization",
        "api_key",
        "apikey",
        "api-key",
        "secret",
        "password",
        "passwd",
        "pwd",
        "awsaccesskeyid",
        "key-pair-id",
        "policy",
        "credential",
        "credentials",
        "jwt",
        "session",
        "sessionid",
        "sid",
        "code",
        "ticket",
    }
)
_SECRET_PREFIXES = ("x-amz-", "x-goog-", "x-oss-", "x-ms-", "x-cos-")
_SECRET_PARTS = re.compile(r"token|secret|signature|passw|apikey|api_key|api-key|credential|private|sas")
_AZURE_SAS = frozenset({"sv", "se", "sp", "sr", "st", "spr", "skoid", "sktid", "ske", "sks"})


def _parameter_names(part: str) -> list[str]:
    """The names of a query (or a fragment written like one), lower-cased; a bare word counts as a name."""
    names = [name for name, _ in parse_qsl(part, keep_blank_values=True)]
    names += [w for w in re.split(r"[&;]", part) if w and "=" not in w]
    return [unquote(n).strip().lower() for n in names]


def secret_parameter(url: str) -> str | None:
    """Why ``url`` looks like it carries a credential: ``"userinfo"`` for ``user:token@``, or the name of
    the query or fragment parameter (as written) that looks like one; None when it looks like none. The
    value is never part of the answer. A credential in a URL's path cannot be told from a path."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "userinfo"
    for part in (parts.query, parts.fragment):
        if not part:
            continue
        names = _parameter_names(part)
        for name in names:
            if name in _SECRET_NAMES or name.startswith(_SECRET_PREFIXES) or _SECRET_PARTS.search(name):
                return name
        sas = sorted(_AZURE_SAS.intersection(names))
        if len(sas) >= 2:  # an Azure shared access signature (its sig is caught above)
            return sas[0]
    return None


def redacted(url: str) -> str:
    """``url`` as a message may show one that was refused: scheme, host, port and path only (no userinfo,
    query or fragment, any of which may hold a credential)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def is_secure(url: str) -> bool:
    """https anywhere, or http to this machine only."""
    scheme, host, _ = origin(url)
    return scheme == "https" or (scheme == "http" and is_loopback(host))


def check_transport(url: str, *, what: str, allow_insecure: bool) -> None:
    """Refuse anything but https (or http to loopback), unless plain http was explicitly allowed."""
    scheme, host, _ = origin(url)
    if scheme == "https" or (scheme == "http" and (is_loopback(host) or allow_insecure)):
        return
    if scheme != "http":
        raise InsecureTransportError(
            f"{what}: expected an https:// address, found {public(url)[:200]!r}.",
            tip="Use an https:// address.",
        )
    raise InsecureTransportError(
        f"{what}: refusing plain http to {host} ({public(url)[:200]}); expected https, since anyone on the "
        "network path could change the answer.",
        tip=f"Use https. If this network is trusted and there is no other way, pass {INSECURE_OPT_IN} "
        f"(or set {INSECURE_ENV}=1); lockbuild then warns on every run and never sends credentials over it.",
    )


def redirect_problem(source: str, target: str) -> str | None:
    """Why a redirect from ``source`` to ``target`` may not be followed, or None: a redirect goes to https,
    or to plain http only from plain http, and to plain http on this machine only from plain http on this
    machine (a hostile server must not send the client to a service of this machine, nor downgrade https).
    Plain http off this machine still needs the transport rule's opt-in (``check_transport``)."""
    to_scheme, to_host, _ = origin(target)
    if to_scheme != "http":
        return None  # https; any other scheme is refused by the transport rule
    from_scheme, from_host, _ = origin(source)
    if from_scheme != "http":
        return f"a redirect from {from_scheme} to plain http ({redacted(target)[:200]}) would drop the encryption"
    if is_loopback(to_host) and not is_loopback(from_host):
        return f"a redirect from {from_host} to plain http on this machine ({redacted(target)[:200]})"
    return None


def check_redirect(source: str, target: str) -> None:
    """Refuse a redirect ``redirect_problem`` finds a problem with (before anything is sent to ``target``)."""
    why = redirect_problem(source, target)
    if why is not None:
        raise InsecureTransportError(
            f"{redacted(source)[:200]} redirected the client, and {why} is refused; expected a redirect to https "
            "(or to plain http on this machine, from plain http on this machine).",
            tip="The server (or whatever answers in its name) sends clients where they must not go: use its https "
            "address, and check HF_ENDPOINT, LOCKBUILD_INDEX_URL and the GitHub bases.",
        )
