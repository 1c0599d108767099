"""Each exit code in docs/site-administrators.md's table, produced by the case the table names: recipe and
policy problems exit 2 like a usage error, with one "did you mean" problem per misspelt key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import REPO_ROOT

from lockbuild.cli import main

DOCS = REPO_ROOT / "docs" / "site-administrators.md"


def _table() -> dict[int, str]:
    text = DOCS.read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.*) \|$", section, re.M)}


def _run(*argv: str) -> Result:
    return CliRunner().invoke(main, list(argv))


def _recipe(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.toml"
    p.write_text(text)
    return p


def test_the_table_lists_every_code_the_cli_uses() -> None:
    from lockbuild.errors import BusyError, IntegrityError, PlatformError, PolicyError, RecipeError, SignatureError

    table = _table()
    assert sorted(table) == [0, 1, 2, 3, 4, 5, 6, 7, 130]
    assert RecipeError.exit_code == PolicyError.exit_code == 2 and "recipe" in table[2] and "policy.toml" in table[2]
    assert SignatureError.exit_code == 3 and IntegrityError.exit_code == 4
    assert BusyError.exit_code == 5 and "busy" in table[5]
    assert PlatformError.exit_code == 6 and "lockbuild test" in table[6]
    from lockbuild.errors import AdvisoryDataError, VulnerableError

    assert VulnerableError.exit_code == 7 and "lockbuild audit" in table[7]
    assert AdvisoryDataError.exit_code == 2 and "VEX" in table[2]


def test_ok_and_failure(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir(mode=0o755)
    assert _run("list", "--root", str(root)).exit_code == 0 and "ok" in _table()[0]
    r = _run("remove", "nosuch", "1.0-cpu", "--root", str(root))
    assert r.exit_code == 1 and r.stderr.startswith("ERROR ") and "failure" in _table()[1]


def test_usage_recipe_and_policy_problems_exit_2(toy_recipe: Path, tmp_path: Path) -> None:
    row = _table()[2]
    assert _run("list", "--no-such-option").exit_code == 2 and "unknown option" in row
    bad = _recipe(tmp_path, "[engine\nname = 1\n")
    r = _run("lock", str(bad), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "not valid TOML" in r.stderr, r.output
    assert "not valid TOML" in row
    r = _run("lock", str(toy_recipe), "--out", str(tmp_path / "o"), "--build", "nope")
    assert r.exit_code == 2 and "no build 'nope'" in r.stderr, r.output
    assert "--build" in row


def test_a_misspelt_recipe_key_is_one_problem_with_did_you_mean(toy_recipe: Path, tmp_path: Path) -> None:
    text = toy_recipe.read_text().replace("requirements = ", "requirments = ")
    r = _run("lock", str(_recipe(tmp_path, text)), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    assert "1 problem in the recipe" in r.stderr, r.stderr
    assert "builds[0].requirments: unknown key; did you mean 'requirements'?" in r.stderr
    assert "requirements: missing" not in r.stderr


def test_a_missing_key_is_still_a_problem(toy_recipe: Path, tmp_path: Path) -> None:
    text = toy_recipe.read_text().replace('requirements = ["toyengine==1.0"]\n', "")
    r = _run("lock", str(_recipe(tmp_path, text)), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "builds[0].requirements: missing" in r.stderr, r.output


def _trust(tmp_path: Path, keys: object) -> Path:
    trust = tmp_path / "trust"
    trust.mkdir()
    (trust / "release.pub").write_bytes(keys.public.read_bytes())  # type: ignore[attr-defined]
    return trust


def test_a_policy_typo_exits_2_with_did_you_mean(keys: object, tmp_path: Path) -> None:
    trust = _trust(tmp_path, keys)
    (trust / "policy.toml").write_text("treshold = 2\n")
    bundle = tmp_path / "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
    bundle.write_bytes(b"x")
    r = _run("verify", str(bundle), "--trust", str(trust))
    assert r.exit_code == 2, r.output
    assert "unknown keys ['treshold']" in r.stderr and "did you mean 'threshold'?" in r.stderr


def test_a_secret_key_among_the_pub_files_says_remove_it(keys: object, tmp_path: Path) -> None:
    trust = _trust(tmp_path, keys)
    (trust / "oops.pub").write_bytes(keys.secret.read_bytes())  # type: ignore[attr-defined]
    bundle = tmp_path / "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
    bundle.write_bytes(b"x")
    r = _run("verify", str(bundle), "--trust", str(trust))
    assert r.exit_code == 3, r.output
    assert f"{trust / 'oops.pub'}: this is a secret key, not a public key: remove it" in r.stderr
    assert "wrong length" not in r.stderr


@pytest.mark.parametrize("password", [None, "pw"])
def test_the_secret_key_test_knows_both_kinds_of_key(tmp_path: Path, password: str | None) -> None:
    from lockbuild.minisign import write_keypair
    from lockbuild.trust.scheme import SCHEME

    secret, public = write_keypair(tmp_path / "k", password=password)
    assert SCHEME.is_secret_key(secret.read_text()) and not SCHEME.is_secret_key(public.read_text())


def test_signature_and_integrity_exit_3_and_4(tmp_path: Path) -> None:
    from test_trust import make_bundle, sign, signer, trust_dir

    alice, bob = signer(tmp_path / "keys", "alice"), signer(tmp_path / "keys", "bob")
    bundle, m = make_bundle(tmp_path / "dist")
    sign(bundle, m, bob)
    r = _run("verify", str(bundle), "--trust", str(trust_dir(tmp_path, alice)))
    assert r.exit_code == 3 and "signature" in _table()[3], r.output
    sign(bundle, m, alice)
    size = bundle.stat().st_size
    with bundle.open("r+b") as f:  # a short copy: the bytes are not the ones signed
        f.truncate(size // 2)
    r = _run("verify", str(bundle), "--trust", str(trust_dir(tmp_path / "t2", alice)))
    assert r.exit_code == 4 and "integrity" in _table()[4], r.output
