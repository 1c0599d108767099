"""The OCI client's pure parts, without a registry: references, transport rules, and what a pulled
OCI manifest must look like before anything it names is trusted or fetched."""

from __future__ import annotations

import json

import pytest

from lockbuild.errors import IntegrityError
from lockbuild.registry.api import OciRef, Registry, RegistryCredentials, RegistryError, parse_ref
from lockbuild.registry.artifact import ARTIFACT_TYPE, CONFIG_TYPE, oci_manifest, parse_artifact


def test_references_and_transport_rules() -> None:
    assert parse_ref("oci://registry.site:5000/engines/vllm:0.11.0-cu128") == OciRef(
        "registry.site:5000", "engines/vllm", "0.11.0-cu128"
    )
    with pytest.raises(RegistryError, match="credentials in it") as exc:
        parse_ref("oci://alice:s3cret@registry.site/engines/vllm:1")
    assert "s3cret" not in str(exc.value)
    for bad in ("https://r/x:1", "oci://r/x", "oci://r/UPPER:1", "oci://r/x:bad/tag", "oci://r/../x:1"):
        with pytest.raises(RegistryError):
            parse_ref(bad)
    assert Registry(parse_ref("oci://registry.site/x:1")).scheme == "https"
    assert Registry(parse_ref("oci://registry.site/x:1"), plain_http=True).scheme == "http"
    assert Registry(parse_ref("oci://127.0.0.1:5000/x:1")).scheme == "http"
    assert Registry(parse_ref("oci://[::1]:5000/x:1")).scheme == "http"


def test_credentials_never_show() -> None:
    creds = RegistryCredentials("alice", "s3cret-pw")
    assert "s3cret-pw" not in repr(creds) and "s3cret-pw" not in str(creds)


GOOD = json.loads(oci_manifest(b"manifest bytes", (), b"untrusted comment: x\n", "x.lbz"))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d.update(artifactType="application/vnd.oci.image.config.v1+json"), "artifactType"),
        (lambda d: d.pop("annotations"), "config or annotations are missing"),
        (lambda d: d["annotations"].pop("dev.lockbuild.signatures"), "carries no"),
        (lambda d: d["annotations"].update({"dev.lockbuild.bundle": 7}), "carries no"),
        (lambda d: d["config"].update(mediaType="application/octet-stream"), "config or annotations"),
        (lambda d: d["config"].update(digest="md5:00"), "no sha256 digest"),
        (lambda d: d["config"].update(size="12"), "no sha256 digest"),
        (lambda d: d.update(schemaVersion=1), "not an OCI image manifest"),
    ],
)
def test_a_pulled_manifest_that_is_not_a_lockbuild_artifact_is_refused(change: object, why: str) -> None:
    doc = json.loads(json.dumps(GOOD))
    change(doc)  # type: ignore[operator]
    with pytest.raises(IntegrityError, match=why):
        parse_artifact(json.dumps(doc).encode(), "oci://r/x:1")
    for raw in (b"not json", b"[]", b"{" * 100_000):
        with pytest.raises(IntegrityError, match="not"):
            parse_artifact(raw, "oci://r/x:1")


def test_the_artifact_carries_the_signed_manifest_as_its_config() -> None:
    art = parse_artifact(json.dumps(GOOD).encode(), "oci://r/x:1")
    assert GOOD["artifactType"] == ARTIFACT_TYPE and GOOD["config"]["mediaType"] == CONFIG_TYPE
    assert art.config_size == len(b"manifest bytes") and art.bundle_name == "x.lbz"


def test_auth_realm_names_a_host_and_an_optional_port() -> None:
    from lockbuild.registry.api import parse_auth_realm

    assert parse_auth_realm("Auth.Site") == ("auth.site", None)
    assert parse_auth_realm("auth.site:5001") == ("auth.site", 5001)
    assert parse_auth_realm("[::1]:5001") == ("::1", 5001)
    for bad in ("https://auth.site", "auth.site/token", "alice@auth.site", "auth.site:99999", ""):
        with pytest.raises(RegistryError, match="--auth-realm"):
            Registry(parse_ref("oci://registry.site/x:1"), auth_realms=[bad])
