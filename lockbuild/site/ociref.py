"""Registry references and where credentials may go (pure): the rules ``site/oci.py`` applies.

- References are ``oci://HOST[:PORT]/REPO:TAG``; a reference with user:password@ in it is refused
  without echoing it.
- Basic credentials, and the Bearer token, go to the registry's own origin only. The password goes to
  a Bearer token realm only when the realm is on the registry's own host and port over the same or a
  stronger scheme, or on a host the user named with ``--auth-realm HOST[:PORT]`` (a weaker scheme is
  refused even then): ``realm_refusal``.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from lockbuild.errors import LockbuildError

_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?")
_LOOPBACK_NAMES = ("localhost",)
_RANK = {"http": 0, "https": 1}


class RegistryError(LockbuildError):
    """The registry refused a request, answered something unusable, or could not be reached."""

    default_tip = "Check the registry's address, that it is reachable from here, and its credentials."


@dataclass(frozen=True)
class OciRef:
    host: str  # host[:port] as written
    repo: str
    tag: str

    def __str__(self) -> str:
        return f"oci://{self.host}/{self.repo}:{self.tag}"

    @property
    def loopback(self) -> bool:
        name = self.host.rsplit(":", 1)[0] if not self.host.startswith("[") else self.host[1:].split("]")[0]
        return is_loopback(name)


def is_loopback(name: str) -> bool:
    if name.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_ref(text: str) -> OciRef:
    """``oci://HOST[:PORT]/REPO:TAG``; the repository and tag as the distribution spec allows them."""
    usage = "expected oci://HOST[:PORT]/REPO:TAG, e.g. oci://registry.site:5000/engines/vllm:0.11.0-cu128"
    if not text.startswith("oci://"):
        raise RegistryError(f"{text[:80]!r} is not a registry reference; {usage}.")
    rest = text[len("oci://") :]
    host, slash, path = rest.partition("/")
    if "@" in host:
        raise RegistryError(
            "refused a registry reference with credentials in it (user:password@host).",
            tip="Pass --username and --password-stdin instead; credentials never go in a reference.",
        )
    repo, colon, tag = path.rpartition(":")
    if not slash or not colon or "/" in tag or not _HOST.fullmatch(host):
        raise RegistryError(f"{text[:200]!r} is not a registry reference; {usage}.")
    if not _REPO.fullmatch(repo) or len(repo) > 255:
        raise RegistryError(f"the repository {repo[:120]!r} is not valid: lower-case words separated by / . _ -.")
    if not _TAG.fullmatch(tag):
        raise RegistryError(f"the tag {tag[:140]!r} is not valid: up to 128 of A-Z a-z 0-9 _ . - (not first . -).")
    return OciRef(host, repo, tag)


@dataclass(frozen=True)
class RegistryCredentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never shown, not even in a traceback
        return "RegistryCredentials(<hidden>)"

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


# -- where credentials may go (pure) -----------------------------------------------------------------


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
    if not _HOST.fullmatch(text):
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
