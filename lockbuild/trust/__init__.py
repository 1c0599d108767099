"""The trust path: one signed statement per signature, a trust store, a pure policy, one opener.

``scheme`` (the signature scheme as a port), ``statement``, ``truststore``, ``policy`` (pure: who counts and
why), ``source`` (the one port), ``opener`` (the one trust decision: ``decide``; ``open_source`` returns a
:class:`TrustedBundle`), ``sign`` (adding a checked co-signature)."""

from lockbuild.trust.opener import (
    DEFAULT_TRUST_DIR,
    Decision,
    TrustedBundle,
    VerifyResult,
    decide,
    digest_signed_file,
    load_trust_store,
    open_bundle,
    open_source,
    read_signatures,
    recheck_kept,
    signature_path,
    trust_dir,
    verify_source,
)
from lockbuild.trust.policy import (
    Evaluation,
    FileDigests,
    Verdict,
    check_complete,
    check_dates,
    check_signed_metadata,
    evaluate,
    signed_manifest,
)
from lockbuild.trust.sign import (
    InMemorySigner,
    KeyFileSigner,
    Signer,
    SignResult,
    carry_over,
    sign_bundle,
    sign_statement,
)
from lockbuild.trust.statement import Statement, format_trusted_comment, manifest_sha256, parse_trusted_comment
from lockbuild.trust.truststore import POLICY_FILE, Policy, TrustStore, build_store, parse_policy

__all__ = [
    "DEFAULT_TRUST_DIR",
    "POLICY_FILE",
    "Decision",
    "Evaluation",
    "FileDigests",
    "InMemorySigner",
    "KeyFileSigner",
    "Policy",
    "SignResult",
    "Signer",
    "Statement",
    "TrustStore",
    "TrustedBundle",
    "Verdict",
    "VerifyResult",
    "build_store",
    "carry_over",
    "check_complete",
    "check_dates",
    "check_signed_metadata",
    "decide",
    "digest_signed_file",
    "evaluate",
    "format_trusted_comment",
    "load_trust_store",
    "manifest_sha256",
    "open_bundle",
    "open_source",
    "parse_policy",
    "parse_trusted_comment",
    "read_signatures",
    "recheck_kept",
    "sign_bundle",
    "sign_statement",
    "signature_path",
    "signed_manifest",
    "trust_dir",
    "verify_source",
]
