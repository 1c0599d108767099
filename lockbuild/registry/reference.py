"""Registry references and credentials (pure): what ``registry/api.py`` is pointed at and with what.
References are ``oci://HOST[:PORT]/REPO:TAG`` (one with user:password@ is refused without echoing it);
credentials are never shown, and where they may go is ``registry/auth.py``'s rule."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from lockbuild.errors import LockbuildError
from lockbuild.wire.urls import is_loopback

_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
HOST_FORM = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?")


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
    if not slash or not colon or "/" in tag or not HOST_FORM.fullmatch(host):
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
