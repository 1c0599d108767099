"""The one exception family lockbuild raises.

Every error carries a message for a person: what was expected, what was found, and
(in ``tip``) what to do about it. The CLI prints ``ERROR <message>`` and ``TIP <tip>``
and exits with the class's ``exit_code``; library code never prints or exits.
"""

from __future__ import annotations


class LockbuildError(Exception):
    """Root of every error lockbuild raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, tip: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip

    def __str__(self) -> str:
        return self.message


class RecipeError(LockbuildError):
    """A recipe is malformed; ``problems`` lists every one found."""

    def __init__(self, message: str, *, problems: tuple[str, ...] = (), tip: str | None = None) -> None:
        super().__init__(message, tip=tip)
        self.problems = problems


class RemoteError(LockbuildError):
    """The package index or the release API answered something unusable."""


class ResolveError(LockbuildError):
    """uv could not resolve the requirements, or its lock broke a rule."""


class FetchError(LockbuildError):
    """A download failed after its retries."""


class IntegrityError(LockbuildError):
    """Bytes do not match the digest, size or layout they were promised to have."""

    exit_code = 4


class SignatureError(LockbuildError):
    """A signature is missing, malformed, untrusted, or does not meet the policy."""

    exit_code = 3


class InstallError(LockbuildError):
    """The installer could not place the environment; the previous one is untouched."""


class BusyError(InstallError):
    """Another installer holds the engine's lock."""

    exit_code = 5


class PlatformError(LockbuildError):
    """This machine cannot run the bundle (another architecture, an older C library, no such Python): a
    self-test here proves nothing, so it stops with its own exit code instead of passing."""

    exit_code = 6


CERTIFICATE_SIGNS = ("certificate", "CERTIFICATE_VERIFY_FAILED", "UnknownIssuer")


def certificate_tip(text: str) -> str | None:
    """The tip for a TLS certificate that could not be verified (a TLS-inspecting proxy, a private index),
    when ``text`` (an error's own words) shows one; else None."""
    if not any(sign.lower() in text.lower() for sign in CERTIFICATE_SIGNS):
        return None
    return (
        "The server's TLS certificate is not signed by a CA this machine trusts (behind a TLS-inspecting proxy, "
        "or for an index with a private CA): set SSL_CERT_FILE to the CA bundle that signs it (or SSL_CERT_DIR "
        "to a directory of CA certificates), or UV_NATIVE_TLS=1 to use the system's certificate store."
    )
