"""urls.py's two rules, as the builder applies them: an address of another scheme than https or http is
refused as not https (never taken for plain http), and ``user:token@`` in a URL is named a credential."""

from __future__ import annotations

import pytest

from lockbuild.errors import LockbuildError
from lockbuild.wire.urls import check_transport, secret_parameter


@pytest.mark.parametrize("url", ["ftp://files.example/x.whl", "file:///etc/passwd"])
def test_another_scheme_is_refused_as_not_https_even_with_plain_http_allowed(url: str) -> None:
    with pytest.raises(LockbuildError, match="expected an https:// address"):
        check_transport(url, what="the index", allow_insecure=True)


def test_a_userinfo_credential_is_named_without_its_value() -> None:
    assert secret_parameter("https://alice:s3cret@index.example/simple/") == "userinfo"
    assert secret_parameter("https://index.example/simple/") is None
