"""What a registry's 401 asks, answered by the pure rule (registry/auth.py): the Basic header, or the
token request to a realm the credentials may go to; refusals say what was found and what to do."""

from __future__ import annotations

import pytest

from lockbuild.registry.auth import TokenRequest, answer_challenge, parse_auth_realm, token_of
from lockbuild.registry.reference import OciRef, RegistryCredentials, RegistryError

REF = OciRef("registry.site:5000", "engines/vllm", "1.0")
CREDS = RegistryCredentials("alice", "s3cret")


def answer(challenge: str, *, creds: RegistryCredentials | None = CREDS, realms: tuple[str, ...] = ()) -> object:
    return answer_challenge(
        challenge,
        scheme="https",
        ref=REF,
        credentials=creds,
        auth_realms=[parse_auth_realm(r) for r in realms],
    )


def test_a_basic_challenge_is_answered_with_the_credentials() -> None:
    assert answer('Basic realm="registry"') == CREDS.basic()


def test_a_basic_challenge_without_credentials_says_how_to_give_them() -> None:
    with pytest.raises(RegistryError, match="needs credentials") as err:
        answer('Basic realm="registry"', creds=None)
    assert "--password-stdin" in err.value.tip


def test_a_bearer_challenge_on_the_registrys_own_origin_asks_for_a_token_with_the_credentials() -> None:
    got = answer('Bearer realm="https://registry.site:5000/token",service="reg"')
    assert isinstance(got, TokenRequest)
    assert got.url.startswith("https://registry.site:5000/token?service=reg&scope=repository%3Aengines%2Fvllm")
    assert got.authorization == CREDS.basic()


def test_a_bearer_realm_elsewhere_gets_nothing_unless_named() -> None:
    with pytest.raises(RegistryError, match="nothing was sent to it") as err:
        answer('Bearer realm="https://auth.elsewhere/token"')
    assert "--auth-realm auth.elsewhere" in err.value.tip
    got = answer('Bearer realm="https://auth.elsewhere/token"', realms=("auth.elsewhere",))
    assert isinstance(got, TokenRequest) and got.url.startswith("https://auth.elsewhere/token?")


def test_a_bearer_realm_over_plain_http_from_an_https_registry_is_refused_even_when_named() -> None:
    with pytest.raises(RegistryError, match="weaker"):
        answer('Bearer realm="http://auth.elsewhere/token"', realms=("auth.elsewhere",))


def test_a_challenge_that_asks_nothing_usable_is_refused() -> None:
    for challenge in ("", "Negotiate abc", 'Bearer service="x"'):
        with pytest.raises(RegistryError, match="without a usable challenge"):
            answer(challenge)


def test_the_token_must_fit_in_a_header() -> None:
    assert token_of({"token": "abc.def"}) == "abc.def"
    assert token_of({"access_token": "xyz"}) == "xyz"
    for bad in ({"token": "a b"}, {"token": "a\nb"}, {"token": ""}, {}, ["abc"], {"token": 5}):
        with pytest.raises(RegistryError, match="without a usable token"):
            token_of(bad)
