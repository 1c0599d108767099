"""The model cache on the node against its signed records: ``verify --models`` walks each repo's folder by
descriptor (a snapshot folder or link swapped, an entry no record lists, a record in another repo's
folder: exit 4 naming it); ``install`` leaves no such entry; an older signed commit is refused unless
``--allow-downgrade``. Each test fails with its check removed."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys
from hubkit import REPO
from modelkit import COMMIT, model_bundle, recipe_text

from lockbuild.cli import main
from lockbuild.recipe.modelrecipe import parse_model_recipe

FOLDER = "models--" + REPO.replace("/", "--")
EVIL = b'{"model_type": "llama", "auto_map": {"AutoModel": "evil.Model"}}\n'


def cli(*args: str | Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def _installed(tmp_path: Path, keys: Keys, *, original: bool = False) -> Path:
    """The tiny model installed under tmp_path/models (with ``original``: its original/ folder too)."""
    recipe = parse_model_recipe(recipe_text(extra='include = ["*.json", "*.safetensors", "*.txt"]\n'), "t.toml")
    packed = model_bundle(tmp_path, keys.secret, recipe=recipe if original else None)
    models = tmp_path / "models"
    code, _, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 0, err
    assert cli("verify", "--models", models, REPO)[0] == 0
    return models


def _refused(models: Path, *named: str, repo: str = REPO) -> str:
    code, out, err = cli("verify", "--models", models, repo, "--json")
    assert code == 4, err
    message: str = json.loads(out)["error"]["message"]
    for n in named:
        assert n in message, message
    return message


def _writable(path: Path) -> None:
    """Make the installed, read-only tree writable for the attack (as an ordinary user would need to)."""
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)


def _copy_elsewhere(models: Path, tmp_path: Path, rel: str) -> Path:
    """A copy of the repo's folder elsewhere, whose ../../blobs are the attacker's files: every blob's bytes
    replaced; returns the copy of ``rel``."""
    other = tmp_path / "elsewhere" / FOLDER
    shutil.copytree(models / FOLDER, other, symlinks=True)
    _writable(other)
    for blob in (other / "blobs").iterdir():
        blob.write_bytes(EVIL)
    return other / rel


def test_a_snapshot_folder_swapped_for_a_link_is_refused(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    rel = f"snapshots/{COMMIT}"
    copy = _copy_elsewhere(models, tmp_path, rel)
    snapshots = models / FOLDER / "snapshots"
    _writable(snapshots)
    shutil.rmtree(snapshots / COMMIT)
    (snapshots / COMMIT).symlink_to(copy)
    assert (snapshots / COMMIT / "config.json").read_bytes() == EVIL  # what a loader now reads
    _refused(models, f"{FOLDER}/{rel} is a symbolic link, not a folder")
    assert cli("verify", "--models", models, "--trust", keys.trust)[0] == 4


def test_a_folder_inside_the_snapshot_swapped_for_a_link_is_refused(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys, original=True)
    rel = f"snapshots/{COMMIT}/original"
    copy = _copy_elsewhere(models, tmp_path, rel)
    snap = models / FOLDER / "snapshots" / COMMIT
    _writable(snap)
    shutil.rmtree(snap / "original")
    (snap / "original").symlink_to(copy)
    assert (snap / "original" / "params.json").read_bytes() == EVIL
    _refused(models, f"{rel} is a symbolic link, not a folder")


def test_a_link_swapped_for_one_to_another_file_or_a_file_is_refused(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    snap = models / FOLDER / "snapshots" / COMMIT
    _writable(snap)
    evil = tmp_path / "evil.json"
    evil.write_bytes(EVIL)
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to(evil)
    _refused(models, "config.json is a link to", str(evil))
    (snap / "config.json").unlink()
    (snap / "config.json").write_bytes(EVIL)
    _refused(models, "config.json is a regular file")


@pytest.mark.parametrize(
    ("planted", "named"),
    [
        (f"snapshots/{COMMIT}/pytorch_model.bin", None),
        (f"snapshots/{COMMIT}/chat_template.jinja", None),
        (f"snapshots/{COMMIT}/sub/modeling_evil.py", f"snapshots/{COMMIT}/sub"),
        ("blobs/" + "e" * 64, None),
        ("refs/pr", None),
        (f".no_exist/{COMMIT}/tokenizer_config.json", ".no_exist"),
        ("snapshots/" + "f" * 40 + "/config.json", "snapshots/" + "f" * 40),
        (".lockbuild/notes.txt", None),
    ],
)
def test_an_entry_no_signed_record_lists_fails_verify_and_install_removes_it(
    tmp_path: Path, keys: Keys, planted: str, named: str | None
) -> None:
    models = _installed(tmp_path, keys)
    repo = models / FOLDER
    _writable(repo)
    target = repo / planted
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\x80\x04K\x01." if planted.endswith(".bin") else EVIL)
    shown = named or planted
    _refused(models, f"{FOLDER}/{shown} is not")
    packed = model_bundle(tmp_path / "again", keys.secret)
    code, out, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust, "--json")
    assert code == 0, err
    in_snapshot = planted.startswith(f"snapshots/{COMMIT}/")  # that snapshot is made anew and swapped in whole
    assert json.loads(out)["removed"] == ([] if in_snapshot else [shown])
    assert not (repo / shown).exists()
    assert cli("verify", "--models", models, REPO, "--trust", keys.trust)[0] == 0
    code, out, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust, "--json")
    assert code == 0 and json.loads(out)["removed"] == []  # nothing left to remove


def test_install_says_what_it_removed(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    refs = models / FOLDER / "refs"
    _writable(refs)
    (refs / "pr").write_text(COMMIT)
    packed = model_bundle(tmp_path / "again", keys.secret)
    code, _, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 0, err
    assert "removed 1 entry of the model's folder that no signed record lists: refs/pr" in err


def test_a_record_in_another_repos_folder_is_refused(tmp_path: Path, keys: Keys) -> None:
    """Model A's record, blobs, snapshot and refs copied over B's folder: verify of B refuses it."""
    models = _installed(tmp_path, keys)
    other = "tiny-org/other-model"
    shutil.copytree(models / FOLDER, models / ("models--" + other.replace("/", "--")), symlinks=True)
    message = _refused(models, f"is the record of {REPO}", "models--tiny-org--other-model", repo=other)
    assert "another model's files" in message
    assert cli("verify", "--models", models)[0] == 4  # every folder is verified when none is named


def _bundle_at(tmp: Path, keys: Keys, commit: str, when: dt.datetime) -> Path:
    recipe = parse_model_recipe(recipe_text(commit=commit, extra='exclude = ["original/*"]\n'), "t.toml")
    return model_bundle(tmp, keys.secret, recipe=recipe, committed=when, out=tmp / commit[:4]).bundle


def test_an_older_signed_commit_is_refused_unless_allow_downgrade(tmp_path: Path, keys: Keys) -> None:
    old_commit, new_commit = "a" * 40, "b" * 40
    old = _bundle_at(tmp_path / "old", keys, old_commit, dt.datetime(2024, 3, 5, 6, 7, 8, tzinfo=dt.UTC))
    new = _bundle_at(tmp_path / "new", keys, new_commit, dt.datetime(2025, 6, 7, 8, 9, 10, tzinfo=dt.UTC))
    models = tmp_path / "models"
    ref = models / FOLDER / "refs" / "main"
    assert cli("install", old, "--models", models, "--trust", keys.trust)[0] == 0
    assert cli("install", new, "--models", models, "--trust", keys.trust)[0] == 0  # newer: fine
    code, out, err = cli("install", old, "--models", models, "--trust", keys.trust, "--json")
    assert code == 1, err  # as an engine's downgrade
    message = json.loads(out)["error"]["message"]
    assert f"at {new_commit}" in message and "holds a newer build (serial 1749283750)" in message
    assert "(1709618828)" in message and ref.read_bytes() == new_commit.encode()
    assert "--allow-downgrade" in json.loads(out)["error"]["tip"]
    code, _, err = cli("install", old, "--models", models, "--trust", keys.trust, "--allow-downgrade")
    assert code == 0, err
    assert ref.read_bytes() == old_commit.encode()
    assert cli("install", old, "--models", models, "--trust", keys.trust)[0] == 0  # the same commit again: fine
    assert cli("verify", "--models", models, "--trust", keys.trust)[0] == 0


def test_the_engines_and_the_models_downgrade_rule_is_one_function() -> None:
    import inspect

    from lockbuild.hubcache import placing
    from lockbuild.install import installer

    for module in (installer, placing):
        text = inspect.getsource(module)
        assert "check_not_older(" in text and "--allow-downgrade" not in text, module.__name__


def test_verify_opens_blobs_by_descriptor_never_through_a_swapped_blobs_folder(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    copy = _copy_elsewhere(models, tmp_path, "blobs")
    repo = models / FOLDER
    _writable(repo)
    os.rename(repo / "blobs", tmp_path / "real-blobs")
    (repo / "blobs").symlink_to(copy)
    _refused(models, f"{FOLDER}/blobs is a symbolic link, not a folder")


def test_a_missing_link_or_folder_of_the_snapshot_is_named(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys, original=True)
    snap = models / FOLDER / "snapshots" / COMMIT
    _writable(snap)
    shutil.rmtree(snap / "original")
    _refused(models, f"snapshots/{COMMIT}/original is missing")
    (snap / "config.json").unlink()
    _refused(models, f"snapshots/{COMMIT}/config.json is missing")
