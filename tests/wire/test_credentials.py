"""Credentials never reach a person's screen: a token that cannot go into a header as it is (a CRLF token
file, a trailing space) is refused before any request, naming the variable and never the value; a CR or LF
in any credential is refused the same way; and every transport failure's text is scrubbed of every secret
the settings (or the registry's connection) hold, by one function (``text.py::scrub``)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, Keys
from hubkit import REPO, tiny_model
from servers import FakeHub

from lockbuild import settings as settings_mod
from lockbuild.cli import main
from lockbuild.errors import FetchError, LockbuildError, RemoteError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import get_json, make_client
from lockbuild.registry.api import Registry, RegistryCredentials, RegistryError, parse_ref
from lockbuild.settings import SettingsError
from lockbuild.text import scrub

PACKAGE = REPO_ROOT / "lockbuild"
SECRET = "hf_0123456789abcdefSECRET"


def cli(*args: str | Path, env: dict[str, str] | None = None, stdin: str | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args], env=env, input=stdin)
    return r.exit_code, r.stdout, r.stderr


def model_recipe(tmp: Path, commit: str) -> Path:
    p = tmp / "tiny.toml"
    p.write_text(f'[model]\nname = "tiny-llama"\nrepo = "{REPO}"\nrevision = "{commit}"\nexclude = ["original/*"]\n')
    return p


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("HF_TOKEN", SECRET + "\r\n", "carriage return (CR) and a line feed (LF)"),
        ("HF_TOKEN", SECRET + "\r", "carriage return (CR) at its end"),
        ("GITHUB_TOKEN", SECRET + " ", "a space or tab at its end"),
    ],
)
def test_a_token_that_cannot_go_into_a_header_is_refused_naming_the_variable_never_the_value(
    hub: FakeHub, keys: Keys, tmp_path: Path, name: str, value: str, said: str
) -> None:
    commit = hub.add_repo(REPO, tiny_model())
    args = ("build", model_recipe(tmp_path, commit), "--key", keys.secret, "--out", tmp_path / "out")
    code, stdout, stderr = cli(*args, "--json", env={name: value})
    assert code == 1, stderr
    error = json.loads(stdout)["error"]
    assert error["type"] == "SettingsError" and error["message"].startswith(f"{name}: expected a token of visible")
    assert said in error["message"] and "not shown" in error["message"]
    assert name in error["tip"]
    code, plain_out, plain_err = cli(*args, env={name: value})
    assert code == 1 and f"ERROR {name}: expected" in plain_err
    for text in (stdout, stderr, plain_out, plain_err):
        assert "SECRET" not in text and "0123456789abcdef" not in text
    assert hub.requests == [] and hub.cdn.requests == []  # refused before any request


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"LOCKBUILD_INDEX_TOKEN": "VALUE7 \rword"}, "LOCKBUILD_INDEX_TOKEN"),
        ({"LOCKBUILD_INDEX_URL": "https://alice:VALUE7%0D@index.example/simple"}, "LOCKBUILD_INDEX_URL (its password)"),
        ({"LOCKBUILD_INDEX_URL": "https://VALUE7%0A:pw@index.example/simple"}, "LOCKBUILD_INDEX_URL (its user name)"),
        ({"HF_TOKEN": "hf_VALUE7é"}, "HF_TOKEN"),
        ({"GITHUB_TOKEN": "ghp_VALUE7\x1bx"}, "GITHUB_TOKEN"),
    ],
)
def test_a_line_break_in_any_credential_and_a_token_not_visible_ascii_are_refused(
    tmp_path: Path, environ: dict[str, str], name: str
) -> None:
    with pytest.raises(SettingsError) as err:
        settings_mod.load(environ, home=tmp_path)
    assert err.value.message.startswith(f"{name}: expected")
    assert "VALUE7" not in err.value.message + err.value.tip


def test_a_basic_auth_password_is_not_otherwise_restricted(tmp_path: Path) -> None:
    s = settings_mod.load({"LOCKBUILD_INDEX_TOKEN": "pa ss wörd\t!"}, home=tmp_path)
    assert s.index_credentials is not None and s.index_credentials.password == "pa ss wörd\t!"


def test_a_registry_password_with_a_line_break_inside_is_refused_before_any_request(tmp_path: Path) -> None:
    ref = "oci://127.0.0.1:9/site/x:1"
    code, stdout, stderr = cli(
        "pull", ref, "--store", tmp_path / "s", "--username", "u", "--password-stdin", "--json", stdin="p\rw-SECRET\n"
    )
    assert code != 0
    error = json.loads(stdout)["error"]
    assert error["message"].startswith("the password on stdin (--password-stdin): expected a credential without")
    assert "SECRET" not in stdout + stderr


def test_a_key_passphrase_with_a_line_break_is_refused_naming_the_variable(keys: Keys, tmp_path: Path) -> None:
    from lockbuild.commands.clikit import take_password

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_KEY_PASSWORD", "pass phrase\r")
        with pytest.raises(SettingsError, match=r"^LOCKBUILD_KEY_PASSWORD: expected a credential without line"):
            take_password()
        mp.setenv("LOCKBUILD_KEY_PASSWORD", "pass phrase with spaces")
        assert take_password() == "pass phrase with spaces"


# -- every transport failure scrubbed ----------------------------------------------------------------------


def test_scrub_hides_each_form_of_a_secret() -> None:
    secret = "s3cré7\r"
    text = f"header {secret!r} / header {secret.encode()!r} / s3cré7 / s3cr%C3%A97%0D / {secret}"
    shown = scrub(text, [secret])
    assert "s3cr" not in shown and shown.count("<hidden>") == 5, shown
    assert scrub("nothing here", []) == "nothing here"


def _leaky(message: str) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(message, request=request)

    return httpx.MockTransport(handler)


def _settings(tmp_path: Path) -> settings_mod.Settings:
    return settings_mod.load(
        {"HF_TOKEN": SECRET, "GITHUB_TOKEN": "ghp_GITHUBSECRET", "LOCKBUILD_INDEX_TOKEN": "INDEXSECRET"}, home=tmp_path
    )


def test_a_transport_error_quoting_a_secret_is_scrubbed_by_the_json_client(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    with make_client(settings=s) as client, pytest.raises(RemoteError) as err:
        client._transport = _leaky(f"Illegal header value b'Bearer {SECRET}' ghp_GITHUBSECRET INDEXSECRET")
        get_json(client, "https://hub.invalid/api/models/o/m", what="asking the Hub")
    assert "cannot reach" in err.value.message and "<hidden>" in err.value.message
    assert all(secret not in err.value.message for secret in s.secrets())


def test_a_transport_error_quoting_a_secret_is_scrubbed_by_downloads(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    with make_client(settings=s) as client, pytest.raises(FetchError) as err:
        client._transport = _leaky(f"header {SECRET!r} refused; {s.secrets()[-1]}")
        fetcher = Fetcher(Cache(tmp_path / "c"), client, sleep=lambda _: None, retries=0, transfer="httpx")
        fetcher.fetch_all([Wanted("https://hub.invalid/o/m/resolve/x/a", "0" * 64, 3, "a")])
    assert "<hidden>" in err.value.message
    assert all(secret not in err.value.message for secret in s.secrets())


def test_a_transport_error_quoting_the_registry_password_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    creds = RegistryCredentials("alice", "REGISTRY-SECRET")
    with Registry(parse_ref("oci://127.0.0.1:9/site/x:1"), credentials=creds) as reg:

        def send(request: httpx.Request, **_: object) -> httpx.Response:
            raise httpx.ConnectError(f"cannot send {creds.basic()} for REGISTRY-SECRET", request=request)

        monkeypatch.setattr(reg.client, "send", send)
        with pytest.raises(RegistryError) as err:
            reg.get_manifest("1")
    assert "<hidden>" in err.value.message and "REGISTRY-SECRET" not in err.value.message
    assert creds.basic().removeprefix("Basic ") not in err.value.message


def test_the_cli_scrubs_the_settings_secrets_from_any_error_it_shows(
    hub: FakeHub, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def leak(*_: object, **__: object) -> object:
        raise LockbuildError(f"something quoted the token {SECRET}", tip=f"and again: {SECRET}")

    monkeypatch.setattr("lockbuild.builder.modelbuild.list_revision", leak)
    commit = hub.add_repo(REPO, tiny_model())
    args = ("build", model_recipe(tmp_path, commit), "--key", keys.secret, "--out", tmp_path / "out")
    code, stdout, stderr = cli(*args, "--json", env={"HF_TOKEN": SECRET})
    assert code == 1 and json.loads(stdout)["error"]["message"] == "something quoted the token <hidden>"
    assert SECRET not in stdout + stderr and "ERROR something quoted the token <hidden>" in stderr


def test_every_caught_transport_error_is_shown_only_through_the_scrub() -> None:
    """An exception caught from httpx (or the registry's TRANSPORT_ERRORS) is never put into text directly
    (an f-string, str, repr, format): only through ``fetch/http.py::failure`` or ``text.py::scrub`` (or
    the registry's ``_transport_error``, which calls it)."""
    allowed = {"failure", "scrub", "_transport_error", "transport_tip", "isinstance", "type"}
    for path in sorted(PACKAGE.rglob("*.py")):
        for handler in ast.walk(ast.parse(path.read_text())):
            if not isinstance(handler, ast.ExceptHandler) or handler.name is None or handler.type is None:
                continue
            caught = ast.unparse(handler.type)
            if "httpx" not in caught and "TRANSPORT_ERRORS" not in caught:
                continue
            for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                if isinstance(node, ast.FormattedValue):
                    used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                    call = node.value.func if isinstance(node.value, ast.Call) else None
                    through = isinstance(call, ast.Name) and call.id in allowed
                    assert handler.name not in used or through, (
                        f"{path.relative_to(PACKAGE)}:{node.lineno} shows {handler.name} unscrubbed"
                    )
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr"):
                    used = {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                    assert handler.name not in used, f"{path.relative_to(PACKAGE)}:{node.lineno} shows it unscrubbed"
    source = (PACKAGE / "registry" / "client.py").read_text()
    assert "scrub(" in source.split("def _transport_error", 1)[1].split("\n    def ", 1)[0]


def test_settings_secrets_include_the_basic_header_a_password_travels_in(tmp_path: Path) -> None:
    s = settings_mod.load({"LOCKBUILD_INDEX_TOKEN": "INDEXSECRET"}, home=tmp_path)
    assert s.index_credentials is not None
    assert s.index_credentials.authorization().removeprefix("Basic ") in s.secrets()
