"""``build`` opens and decrypts its key before it locks or downloads anything: a missing key file, a key
others can read, a wrong passphrase, or an encrypted key with no terminal and no LOCKBUILD_KEY_PASSWORD
stop it with exit 3 before the index hears a single request, and nothing is left in OUT."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockbuild.cli import main
from lockbuild.minisign import write_keypair


def _build(recipe: Path, key: Path, out: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["build", str(recipe), "--key", str(key), "--out", str(out)])
    return r.exit_code, r.stderr


def _missing(tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Path, str]:
    return tmp / "nowhere.key", "No such file or directory"


def _readable(tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Path, str]:
    key, _ = write_keypair(tmp / "shared", password=None)
    key.chmod(0o644)
    return key, "has mode 0644"


def _wrong_passphrase(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Path, str]:
    key, _ = write_keypair(tmp / "locked", password="right")
    mp.setenv("LOCKBUILD_KEY_PASSWORD", "wrong")
    return key, "wrong passphrase"


def _no_terminal(tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Path, str]:
    key, _ = write_keypair(tmp / "locked", password="right")  # no LOCKBUILD_KEY_PASSWORD, no /dev/tty here
    return key, "no terminal to ask for its passphrase"


@pytest.mark.parametrize("make", [_missing, _readable, _wrong_passphrase, _no_terminal])
def test_a_bad_key_stops_build_before_its_first_request(
    make: Callable[[Path, pytest.MonkeyPatch], tuple[Path, str]],
    env: object,
    toy_recipe: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(tmp_path / "fresh-cache"))  # nothing cached: all would be asked
    env.requests.clear()  # type: ignore[attr-defined]
    key, found = make(tmp_path, monkeypatch)
    code, err = _build(toy_recipe, key, tmp_path / "out")
    assert code == 3, err
    assert found in err and err.startswith("ERROR ") and "Traceback" not in err
    assert env.requests == []  # type: ignore[attr-defined]
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_the_key_is_checked_and_signed_in_two_fresh_processes(
    env: object, keys: object, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check signs nothing and comes before the first request; the signing process reads the key
    again after the bundle is packed, and the build's own process never reads it."""
    from lockbuild.minisign import keyfiles
    from lockbuild.trust import sign as sign_mod

    calls: list[tuple[int, int]] = []
    real = sign_mod.sign_in_fresh_process

    def spy(key: Path, items: list[tuple[bytes, str]], **kw: object) -> object:
        calls.append((len(items), len(env.requests)))  # type: ignore[attr-defined]
        return real(key, items, **kw)  # type: ignore[arg-type]

    def never(*_a: object, **_k: object) -> None:
        raise AssertionError("the build's own process read the secret key")

    monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(sign_mod, "sign_in_fresh_process", spy)
    monkeypatch.setattr(keyfiles, "read_secret_key", never)
    env.requests.clear()  # type: ignore[attr-defined]
    secret = tmp_path / "release.key"
    shutil.copy(keys.secret, secret)  # type: ignore[attr-defined]
    secret.chmod(0o600)
    code, err = _build(toy_recipe, secret, tmp_path / "out")
    assert code == 0, err
    assert [n for n, _ in calls] == [0, 1]  # the check (nothing signed), then the bundle's signature
    assert calls[0][1] == 0 and calls[1][1] > 0  # the check before any request, the signature after them


def test_a_key_replaced_during_the_build_signs_nothing(
    env: object, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockbuild.trust import sign as sign_mod

    first, _ = write_keypair(tmp_path / "first", password=None)
    other, _ = write_keypair(tmp_path / "other", password=None)
    real = sign_mod.sign_in_fresh_process

    def swap_after_check(key: Path, items: list[tuple[bytes, str]], **kw: object) -> object:
        return real(key if not items else other, items, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sign_mod, "sign_in_fresh_process", swap_after_check)
    code, err = _build(toy_recipe, first, tmp_path / "out")
    assert code == 3 and "when the build started; expected the same key throughout" in err
    assert not list((tmp_path / "out").glob("*.minisig"))
