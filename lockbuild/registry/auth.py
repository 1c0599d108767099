"""Where a registry's credentials may go, and what its challenge asks (pure): the rules ``registry/client.py``
applies when a registry answers 401. Basic credentials and the Bearer token go to the registry's own origin
only; the password goes to a token realm only on the registry's own host and port over no weaker scheme, or
on a host named with ``--auth-realm`` (``realm_refusal``). ``answer_challenge`` says what to send."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from lockbuild.registry.reference import HOST_FORM, OciRef, RegistryCredentials, RegistryError
from lockbuild.registry.transport import FAIL_TIP
from lockbuild.wire.rules import header_token

_RANK = {"http": 0, "https": 1}


@dataclass(frozen=True)
class TokenRequest:
    """The GET to a Bearer token realm, and the Authorization header it carries (the Basic credentials, if any)."""

    url: str
    authorization: str | None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


def answer_challenge(
    challenge: str,
    *,
    scheme: str,
    ref: OciRef,
    credentials: RegistryCredentials | None,
    auth_realms: Sequence[tuple[str, int | None]],
) -> str | TokenRequest:
    """What a 401's ``challenge`` asks of a registry reached over ``scheme``: the Basic Authorization
    value, or the token request to make (only to a realm that ``realm_refusal`` lets through)."""
    kind, params = parse_challenge(challenge)
    if kind == "basic":
        if credentials is None:
            raise RegistryError(
                "the registry needs credentials.",
                tip="Pass --username NAME and the password on stdin with --password-stdin.",
            )
        return credentials.basic()
    if kind != "bearer" or "realm" not in params:
        raise RegistryError("the registry refused the request (401) without a usable challenge.", tip=FAIL_TIP)
    realm = params["realm"]
    why = realm_refusal(scheme, ref.host, realm, auth_realms)
    if why is not None:
        raise RegistryError(
            f"its token realm {realm[:200]!r} {why}; nothing was sent to it.", tip=realm_tip(realm, scheme)
        )
    query = {k: v for k, v in params.items() if k in ("service", "scope")}
    query.setdefault("scope", f"repository:{ref.repo}:pull,push")
    url = f"{realm}{'&' if '?' in realm else '?'}{urlencode(query)}"
    return TokenRequest(url, credentials.basic() if credentials is not None else None)


def token_of(answer: object) -> str:
    """The token in a token service's (parsed) answer, fit to go into a header."""
    token = (answer.get("token") or answer.get("access_token")) if isinstance(answer, dict) else None
    if not isinstance(token, str) or not header_token(token):
        raise RegistryError("the token service answered without a usable token.", tip=FAIL_TIP)
    return token


# -- where credentials may go -------------------------------------------------------------------------


def _authority(scheme: str, netloc: str) -> tuple[str, int | None] | None:
    """(host, port) of ``netloc`` under ``scheme``, the port defaulted by the scheme; None if unusable."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None:
        return None
    return host, port or (443 if scheme == "https" else 80 if scheme == "http" else None)


def parse_auth_realm(text: str) -> tuple[str, int | None]:
    """``--auth-realm HOST[:PORT]``: (host, port); no port means any port of that host."""
    if not HOST_FORM.fullmatch(text):
        raise RegistryError(
            f"--auth-realm {text[:120]!r} is not a host: expected HOST or HOST:PORT, "
            "e.g. auth.registry.site or auth.registry.site:5001."
        )
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port
    except ValueError:
        raise RegistryError(f"--auth-realm {text[:120]!r} has no valid port.") from None
    return (parts.hostname or "").lower(), port


def realm_refusal(
    registry_scheme: str, registry_host: str, realm: str, allowed: Sequence[tuple[str, int | None]] = ()
) -> str | None:
    """Why the Bearer token realm ``realm`` may not be sent the registry's credentials, or None if it
    may: on the registry's own host and port over the same or a stronger scheme, or on a host named in
    ``allowed`` (from ``--auth-realm``) over the same or a stronger scheme."""
    try:
        parts = urlsplit(realm)
        _ = parts.port
    except ValueError:
        return "is not a URL"
    if parts.scheme not in _RANK or not parts.hostname:
        return "is not an http or https URL"
    if parts.username is not None:
        return "has credentials in it"
    if _RANK[parts.scheme] < _RANK.get(registry_scheme, 1):
        return f"uses {parts.scheme}, weaker than the registry's {registry_scheme}"
    here = _authority(parts.scheme, parts.netloc)
    if here is not None and here == _authority(registry_scheme, registry_host):
        return None
    for host, port in allowed:
        if here is not None and here[0] == host and port in (None, here[1]):
            return None
    shown = f"{here[0]}:{here[1]}" if here else parts.netloc
    return f"is on {shown}, not the registry's own {registry_host}"


def realm_tip(realm: str, registry_scheme: str) -> str:
    parts = urlsplit(realm)
    if parts.scheme in _RANK and _RANK[parts.scheme] < _RANK.get(registry_scheme, 1):
        return "The registry's token service must be reached over https; fix its realm setting."
    host = parts.netloc.rsplit("@", 1)[-1] or "HOST"
    return (
        f"If {host[:100]} is your registry's own token service, name it: --auth-realm {host[:100]} "
        "(credentials go nowhere else)."
    )
