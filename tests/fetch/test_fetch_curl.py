"""The fetcher's transfer through libcurl keeps the client's rules: the transport rule on every redirect,
credentials from the settings only to their host, http and https only, and a clear error without pycurl."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import pytest
from servers import FakeServer

from lockbuild.errors import FetchError
from lockbuild.fetch import curlget
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import make_client
from lockbuild.settings import Settings
from lockbuild.wire.urls import InsecureTransportError


def _wanted(url: str, data: bytes, label: str = "a.tgz") -> Wanted:
    return Wanted(url, hashlib.sha256(data).hexdigest(), len(data), label)


def test_the_fetcher_receives_through_libcurl_by_default(tmp_path: Path) -> None:
    with make_client() as c:
        assert Fetcher(Cache(tmp_path), c).transfer == "curl"


def test_a_redirect_to_plain_http_off_loopback_is_refused_before_it_is_followed(tmp_path: Path) -> None:
    srv = FakeServer()
    try:
        srv.redirects["/gh/o/r/a.tgz"] = "http://192.0.2.1/a.tgz"
        with make_client() as c:
            c.follow_redirects = True
            with pytest.raises(InsecureTransportError, match=r"refusing plain http to 192\.0\.2\.1"):
                Fetcher(Cache(tmp_path), c, sleep=lambda s: None).fetch_all([_wanted(f"{srv.url}/gh/o/r/a.tgz", b"x")])
    finally:
        srv.close()


def test_the_settings_token_goes_to_its_host_only_and_not_across_a_redirect(tmp_path: Path) -> None:
    github, storage = FakeServer(), FakeServer()
    try:
        data = b"asset bytes" * 1000
        storage.add_file("/objects/a", data)
        github.redirects["/gh/o/r/releases/download/v1/a.tgz"] = f"{storage.url}/objects/a"
        s = Settings(github.index_url(), github.github_api, github.github_download, tmp_path, github_token="ghp_x")
        with make_client(settings=s) as c:
            c.follow_redirects = True
            url = f"{github.github_download}/o/r/releases/download/v1/a.tgz"
            report = Fetcher(Cache(tmp_path / "cache"), c).fetch_all([_wanted(url, data)])
        assert report.files[0].path.read_bytes() == data
        assert [h["authorization"] for _, h in github.request_headers] == ["Bearer ghp_x"]
        assert storage.request_headers and not any("authorization" in h for _, h in storage.request_headers)
    finally:
        github.close()
        storage.close()


def test_a_url_of_another_scheme_is_never_fetched(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for the cache")
    with make_client() as c, pytest.raises(FetchError, match=r"cannot fetch file://.*unsupported protocol"):
        Fetcher(Cache(tmp_path / "cache"), c).fetch_all([_wanted(secret.as_uri(), b"not for the cache")])


def test_without_pycurl_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(curlget, "pycurl", None)
    srv = FakeServer()
    try:
        srv.add_file("/a.tgz", b"x")
        with make_client() as c, pytest.raises(FetchError, match=r"needs pycurl") as exc:
            Fetcher(Cache(tmp_path), c).fetch_all([_wanted(f"{srv.url}/a.tgz", b"x")])
        assert exc.value.tip is not None and "pip install pycurl" in exc.value.tip
    finally:
        srv.close()


def test_a_private_ca_is_taken_from_ssl_cert_file_and_without_it_the_tip_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_sdist_metadata import make_ca_and_server_cert

    ca, cert, key = make_ca_and_server_cert(tmp_path)
    srv = FakeServer()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.httpd.socket = ctx.wrap_socket(srv.httpd.socket, server_side=True)
    try:
        data = b"over tls" * 1000
        srv.add_file("/a.tgz", data)
        url = f"https://127.0.0.1:{srv.httpd.server_address[1]}/a.tgz"
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with make_client() as c, pytest.raises(FetchError, match="certificate") as exc:
            Fetcher(Cache(tmp_path / "c1"), c, sleep=lambda s: None).fetch_all([_wanted(url, data)])
        assert exc.value.tip is not None and "SSL_CERT_FILE" in exc.value.tip
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        with make_client() as c:
            report = Fetcher(Cache(tmp_path / "c2"), c).fetch_all([_wanted(url, data)])
        assert report.files[0].path.read_bytes() == data
    finally:
        srv.close()
