"""The one exception family lockbuild raises.

Every error says what was expected, what was found and (in ``tip``, else its kind's ``default_tip``) what to
do. The CLI prints ``ERROR <message>`` and ``TIP <tip>`` and exits with the class's ``exit_code``; library
code never prints or exits."""

from __future__ import annotations

NETWORK_TIP = "Check the network, the proxy settings (HTTPS_PROXY, NO_PROXY) and the address."
CERTIFICATE_SIGNS = ("certificate", "CERTIFICATE_VERIFY_FAILED", "UnknownIssuer")
TLS_TIP = (
    "The server's TLS certificate is not signed by a CA this machine trusts (behind a TLS-inspecting proxy, "
    "or for an index with a private CA): set SSL_CERT_FILE to the CA bundle that signs it (or SSL_CERT_DIR "
    "to a directory of CA certificates), or UV_NATIVE_TLS=1 to use the system's certificate store."
)


def certificate_tip(text: str) -> str | None:
    """The tip for a TLS certificate that could not be verified (a TLS-inspecting proxy, a private index),
    when ``text`` (an error's own words) shows one; else None."""
    if not any(sign.lower() in text.lower() for sign in CERTIFICATE_SIGNS):
        return None
    return TLS_TIP


def transport_tip(exc: BaseException) -> str:
    """The tip for a failed connection: a certificate that did not verify gets SSL_CERT_FILE
    (:func:`certificate_tip`), the rest the network's own."""
    import ssl

    seen: BaseException | None = exc
    for _ in range(8):  # the exception and what it was raised from (httpx wraps ssl's error)
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError) or certificate_tip(str(seen)):
            return TLS_TIP
        seen = seen.__cause__ or seen.__context__
    return NETWORK_TIP


class LockbuildError(Exception):
    """Root of every error lockbuild raises on purpose."""

    exit_code = 1
    default_tip = "Run the command again with --verbose to see where it failed."

    def __init__(self, message: str, *, tip: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip if tip is not None else type(self).default_tip
        self.details: dict[str, object] = {}  # more of the story for --json, beside "error" (e.g. the candidates)

    def envelope(self, *, message: str | None = None, tip: str | None = None) -> dict[str, object]:
        """The one JSON object every command prints for this error under ``--json`` (``message`` and
        ``tip``: the words as shown, secrets scrubbed)."""
        error = {
            "type": type(self).__name__,
            "message": self.message if message is None else message,
            "tip": self.tip if tip is None else tip,
            "exit_code": self.exit_code,
        }
        return {"ok": False, "error": error, **self.details}

    def __str__(self) -> str:
        return self.message


class RecipeError(LockbuildError):
    """A recipe is malformed, or names what it cannot have (exit 2, like a usage error); ``problems``
    lists every one found."""

    exit_code = 2
    default_tip = "Fix the recipe as the message says; docs/release-engineers.md describes every recipe key."

    def __init__(self, message: str, *, problems: tuple[str, ...] = (), tip: str | None = None) -> None:
        super().__init__(message, tip=tip)
        self.problems = problems


class RemoteError(LockbuildError):
    """The package index or the release API answered something unusable."""

    default_tip = NETWORK_TIP


class ResolveError(LockbuildError):
    """uv could not resolve the requirements, or its lock broke a rule."""

    default_tip = (
        "Check the requirements the message names: they must resolve on the index as it stood at "
        "the build's cut-off (as-of)."
    )

    def __init__(
        self,
        message: str,
        *,
        tip: str | None = None,
        needs_wheel: tuple[tuple[str, str], ...] = (),
        platform: str | None = None,
        forced_by: str = "",
    ) -> None:
        super().__init__(message, tip=tip)
        # (name, the newest release uv found no wheel of, or "") for each package uv needed a wheel of
        self.needs_wheel = needs_wheel
        self.platform = platform  # a higher manylinux level of the build's architecture that has their wheels
        self.forced_by = forced_by  # "NAME VERSION": the release that needs that level


class FetchError(LockbuildError):
    """A download failed after its retries."""

    default_tip = (
        "Run the command again (finished files come from the cache); " + NETWORK_TIP[0].lower() + NETWORK_TIP[1:]
    )


class IntegrityError(LockbuildError):
    """Bytes do not match the digest, size or layout they were promised to have."""

    exit_code = 4
    default_tip = "Do not use these bytes: copy the file again from its source and compare its sha256."


class SignatureError(LockbuildError):
    """A signature is missing, malformed, untrusted, or does not meet the policy."""

    exit_code = 3
    default_tip = "lockbuild verify BUNDLE --trust DIR says which signature counts and why the others do not."


class PolicyError(SignatureError):
    """A trust directory's ``policy.toml`` is malformed: nothing installs until it is fixed (exit 2, like a
    recipe with problems; still a signature error, so every trust decision fails closed on it)."""

    exit_code = 2
    default_tip = (
        "policy.toml takes: threshold = 2 (a whole number, at least 1), not-before = "
        "2026-01-01T00:00:00Z and not-after = ... (times with a zone). Fix the file."
    )


class InstallError(LockbuildError):
    """The installer could not place the environment; the previous one is untouched."""

    default_tip = "The previous environment is untouched: fix what the message names, then install again."


class BusyError(InstallError):
    """Another installer holds the engine's lock."""

    exit_code = 5
    default_tip = "Wait for the other installer to finish, or pass --wait SECONDS to wait for it."


class PlatformError(LockbuildError):
    """This machine cannot run the bundle (another architecture, an older C library, no such Python): a
    self-test here proves nothing, so it stops with its own exit code instead of passing."""

    exit_code = 6
    default_tip = "Run the self-test on a machine of the bundle's target (lockbuild inspect BUNDLE names it)."


class AdvisoryDataError(LockbuildError):
    """An OSV record, a vulnerability database or a VEX document is malformed or over its bounds (exit 2, like
    any input that cannot be read)."""

    exit_code = 2
    default_tip = (
        "Use the database as osv.dev publishes it (a directory of OSV JSON records, or PyPI/all.zip) and an "
        "OpenVEX document; the message names what was refused."
    )


class VulnerableError(LockbuildError):
    """Known vulnerabilities apply to what was built or audited (exit 7; 1 stays "failure")."""

    exit_code = 7
    default_tip = "Upgrade the packages named (a newer build), or record why they do not apply in a VEX document."
