"""Model bundles on the node: install --models writes the Hugging Face cache layout that the real
huggingface_hub finds offline; every refusal, each failing with its check removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys
from hubkit import REPO, tiny_model
from modelkit import COMMIT, model_bundle

from lockbuild.cli import main

FOLDER = "models--" + REPO.replace("/", "--")


def cli(*args: str | Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def hub_offline(models: Path, code: str) -> str:
    """Run ``code`` with the real huggingface_hub, offline, on the cache ``models``; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(models), HF_HUB_DISABLE_TELEMETRY="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_install_writes_the_hub_cache_layout_that_huggingface_hub_finds_offline(tmp_path: Path, keys: Keys) -> None:
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    code, out, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["repo"] == REPO and got["commit"] == COMMIT
    repo = models / FOLDER
    files = tiny_model()
    taken = sorted(
        p
        for p in files
        if not p.endswith((".bin", ".pth"))
        and not p.startswith("original/")
        and p not in ("README.md", ".gitattributes")
    )
    snap = repo / "snapshots" / COMMIT
    listed = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_symlink())
    assert listed == taken
    assert (repo / "refs" / "main").read_bytes() == COMMIT.encode()  # no newline
    for path in taken:
        link = snap / path
        target = os.readlink(link)
        assert target.startswith("../" * (2 + path.count("/")) + "blobs/")
        assert link.read_bytes() == files[path]
        assert not (link.resolve().stat().st_mode & 0o222)  # read-only
    code = f"""
from huggingface_hub import snapshot_download, hf_hub_download
import os
p = snapshot_download({REPO!r})
print(p)
print(hf_hub_download({REPO!r}, "config.json"))
print(sorted(os.listdir(p)))
"""
    lines = hub_offline(models, code).splitlines()
    assert lines[0] == str(snap)
    assert lines[1] == str(snap / "config.json")


def test_blobs_and_snapshot_are_what_snapshot_download_writes(tmp_path: Path, keys: Keys, hub: object) -> None:
    """The fake Hub serves the same files; the real client's own download is the reference layout."""
    from servers import FakeHub

    assert isinstance(hub, FakeHub)
    files = tiny_model()
    hub.add_repo(REPO, files, commit=COMMIT)
    ref = tmp_path / "ref"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(ref), HF_HUB_DISABLE_TELEMETRY="1")
    code = (
        f"from huggingface_hub import snapshot_download\n"
        f"snapshot_download({REPO!r}, revision={COMMIT!r}, allow_patterns={list(_taken(files))!r})\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    assert cli("install", packed.bundle, "--models", models, "--trust", keys.trust)[0] == 0

    def layout(root: Path) -> dict[str, str]:
        out = {}
        for sub in ("blobs", "snapshots"):
            for p in sorted((root / FOLDER / sub).rglob("*")):
                rel = str(p.relative_to(root / FOLDER))
                out[rel] = os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes().hex())
        return out

    assert layout(models) == layout(ref)


def _taken(files: dict[str, bytes]) -> list[str]:
    return sorted(
        p
        for p in files
        if not p.endswith((".bin", ".pth"))
        and not p.startswith("original/")
        and p not in ("README.md", ".gitattributes")
    )


def _installed(tmp_path: Path, keys: Keys) -> Path:
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    code, _, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 0, err
    return models


def test_verify_models_passes_intact_and_names_a_changed_file_with_exit_4(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    code, out, err = cli("verify", "--models", models, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert [v["repo"] for v in got["verified"]] == [REPO] and got["verified"][0]["current"]
    code, out, _ = cli("verify", "--models", models, REPO, "--trust", keys.trust, "--json")
    assert code == 0 and json.loads(out)["verified"][0]["signers"]
    blob = (models / FOLDER / "snapshots" / COMMIT / "config.json").resolve()
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[5] ^= 1
    blob.write_bytes(bytes(data))
    code, out, err = cli("verify", "--models", models, "--json")
    assert code == 4
    error = json.loads(out)["error"]
    assert "model/config.json" in error["message"]


def test_verify_models_refuses_a_file_of_another_size_and_a_moved_link(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    snap = models / FOLDER / "snapshots" / COMMIT
    shard = (snap / "model-00001-of-00002.safetensors").resolve()
    shard.chmod(0o644)
    with shard.open("ab") as f:
        f.write(b"x")
    code, _, err = cli("verify", "--models", models)
    assert code == 4 and "model-00001-of-00002.safetensors" in err
    models = _installed(tmp_path / "again", keys)
    snap = models / FOLDER / "snapshots" / COMMIT
    (snap / "vocab.txt").unlink()
    (snap / "vocab.txt").symlink_to("../../blobs/" + os.readlink(snap / "config.json").rsplit("/", 1)[1])
    code, _, err = cli("verify", "--models", models)
    assert code == 4 and "vocab.txt" in err


def test_verify_models_with_trust_refuses_an_altered_record(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    record = models / FOLDER / ".lockbuild" / f"{COMMIT}.toml"
    record.chmod(0o644)
    text = record.read_bytes()
    record.write_bytes(text.replace(b'\nlockbuild = "', b'\nlockbuild = "9', 1))  # still a well-formed record
    assert record.read_bytes() != text
    assert cli("verify", "--models", models)[0] == 0  # the files match; only the signatures can tell
    code, _, err = cli("verify", "--models", models, "--trust", keys.trust)
    assert code in (3, 4) and "manifest" in err


def test_list_models_shows_what_is_installed(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    code, out, _ = cli("list", "--models", models, "--json")
    assert code == 0
    (row,) = json.loads(out)["installed"]
    assert (row["repo"], row["commit"], row["name"]) == (REPO, COMMIT, "tiny-llama")
    code, out, _ = cli("list", "--models", models)
    assert REPO in out and COMMIT in out


def test_a_model_bundle_is_refused_as_an_engine_install(tmp_path: Path, keys: Keys) -> None:
    packed = model_bundle(tmp_path, keys.secret)
    code, _, err = cli("install", packed.bundle, "--root", tmp_path / "root", "--trust", keys.trust)
    assert code == 1 and "model bundle" in err and "--models" in err
    assert not (tmp_path / "root").exists() or not list((tmp_path / "root").iterdir())


def test_an_untrusted_model_bundle_places_nothing(tmp_path: Path, keys: Keys) -> None:
    from conftest import make_keys

    other = make_keys(tmp_path / "other", "other")
    packed = model_bundle(tmp_path, other.secret)
    models = tmp_path / "models"
    code, _, _ = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 3
    assert not (models / FOLDER).exists()


def test_a_models_folder_others_can_write_is_refused(tmp_path: Path, keys: Keys) -> None:
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    models.mkdir()
    models.chmod(0o777)
    code, _, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 1 and "refused --models" in err and "writable by its group or by others" in err
    models.chmod(0o755)
    (models / FOLDER).symlink_to(tmp_path)
    code, _, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code == 1 and "symbolic link" in err


def test_a_failed_reinstall_leaves_the_previous_snapshot_whole(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _installed(tmp_path, keys)
    snap = models / FOLDER / "snapshots" / COMMIT
    before = {p.name: p.read_bytes() for p in snap.iterdir()}
    packed = model_bundle(tmp_path / "second", keys.secret)
    from lockbuild import fsio

    real = fsio.symlink_under
    made: list[str] = []

    def dies(dest: Path, rel: str, target: str) -> None:
        if len(made) == 3:
            raise KeyboardInterrupt  # a kill halfway through the new snapshot
        made.append(rel)
        real(dest, rel, target)

    monkeypatch.setattr(fsio, "symlink_under", dies)
    code, _, _ = cli("install", packed.bundle, "--models", models, "--trust", keys.trust)
    assert code != 0
    assert {p.name: p.read_bytes() for p in snap.iterdir()} == before
    assert (models / FOLDER / "refs" / "main").read_bytes() == COMMIT.encode()
    monkeypatch.setattr(fsio, "symlink_under", real)
    (models / FOLDER / f"snapshot-{COMMIT}.partial").mkdir()  # as a kill before the clean-up would leave it
    assert cli("install", packed.bundle, "--models", models, "--trust", keys.trust)[0] == 0
    assert not [p for p in (models / FOLDER).iterdir() if p.name.endswith(".partial")]
    assert cli("verify", "--models", models)[0] == 0


def test_an_engine_installed_with_models_finds_them_offline(env: object, keys: Keys, tmp_path: Path) -> None:
    """install ENGINE.lbz --models M: HF_HUB_CACHE=M and HF_HUB_OFFLINE=1 in the engine's runtime settings,
    seen by the environment's interpreter started directly (no activation)."""
    from conftest import TOY_RECIPE

    models = _installed(tmp_path, keys)
    recipe = tmp_path / "toy.toml"
    recipe.write_text(TOY_RECIPE)
    code, out, err = cli("build", recipe, "--key", keys.secret, "--out", tmp_path / "dist", "--json")
    assert code == 0, err
    engine = Path(json.loads(out)["bundles"][0]["bundle"])
    root = tmp_path / "engines"
    code, out, err = cli(
        "install", engine, "--root", root, "--models", models, "--trust", keys.trust, "--gpu-check", "skip"
    )
    assert code == 0, err
    python = root / "toyengine" / "1.0-cpu" / "bin" / "python"
    probe = "import os; print(os.environ['HF_HUB_CACHE'], os.environ['HF_HUB_OFFLINE'])"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    r = subprocess.run([str(python), "-c", probe], env=clean, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(models.absolute()), "1"]
    code, out, _ = cli("list", "--root", root, "--json")
    assert code == 0
    assert json.loads(out)["installed"][0]["env"]["HF_HUB_CACHE"] == str(models.absolute())


def test_the_self_test_runs_the_smoke_command_with_the_model_in_place_and_no_network(
    blank_server: object, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test ENGINE.lbz --model MODEL.lbz: the smoke command finds the model's snapshot through HF_HUB_CACHE,
    offline, inside the sandbox; without --model the same command fails."""
    import shutil
    import tempfile

    from conftest import day, uv_wheel
    from servers import FakeServer, make_wheel
    from test_selftest import ENGINE, PREEMPT, RECIPE, needs_netns

    if needs_netns.args[0] or shutil.which("strace") is None:
        pytest.skip("this machine cannot start the bubblewrap sandbox, or has no strace")
    assert isinstance(blank_server, FakeServer)
    s = blank_server
    s.reset()
    s.publish(*uv_wheel(), uploaded=day(1))
    s.publish(
        *make_wheel(
            "netengine",
            "1.0",
            modules={"netengine/__init__.py": ENGINE, "_a_preempt.pth": PREEMPT},
            scripts={"netengine": "netengine:main"},
        ),
        uploaded=day(1),
    )
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", s.index_url())
    smoke = (
        'smoke = ["sh", "-c", "test \\"$HF_HUB_OFFLINE\\" = 1 && cat '
        f'\\"$HF_HUB_CACHE/{FOLDER}/snapshots/{COMMIT}/config.json\\""]'
    )
    recipe = tmp_path / "engine.toml"
    recipe.write_text(RECIPE.format(extra=smoke, variant="model"))
    code, out, err = cli("build", recipe, "--key", keys.secret, "--out", tmp_path / "dist", "--json")
    assert code == 0, err
    engine = Path(json.loads(out)["bundles"][0]["bundle"])
    model = model_bundle(tmp_path, keys.secret).bundle
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, out, err = cli("test", engine, "--model", model, "--trust", keys.trust, "--json")
    assert code == 0, (out, err)
    report = json.loads(out)["self_test"][0]
    smoke_step = next(x for x in report["steps"] if x["name"] == "smoke")
    assert smoke_step["status"] == "passed" and report["attempts"] == []
    code, out, _ = cli("test", engine, "--trust", keys.trust, "--json")
    assert code == 1  # without the model the smoke command finds nothing


@pytest.mark.slow
def test_transformers_loads_config_and_tokenizer_from_the_installed_cache(tmp_path: Path, keys: Keys) -> None:
    pytest.importorskip("transformers")
    models = _installed(tmp_path, keys)
    code = f"""
import transformers
transformers.logging.set_verbosity_error()
from transformers import AutoConfig, AutoTokenizer
c = AutoConfig.from_pretrained({REPO!r})
t = AutoTokenizer.from_pretrained({REPO!r})
print(c.model_type, c.num_hidden_layers, t("hello world")["input_ids"])
"""
    out = hub_offline(models, code).strip().splitlines()[-1]
    assert out == "llama 2 [3, 4]"


def test_a_model_bundle_imports_into_a_store_and_installs_from_it(tmp_path: Path, keys: Keys) -> None:
    """Models are bundles like any other: import keeps each member once by sha256, and the build installs
    from the store (ENGINE/VERSION-VARIANT = NAME/COMMIT-hf) through the same --models placement."""
    packed = model_bundle(tmp_path, keys.secret)
    store = tmp_path / "store"
    code, _, err = cli("import", packed.bundle, "--trust", keys.trust, "--store", store)
    assert code == 0, err
    models = tmp_path / "models"
    code, _, err = cli(
        "install", f"tiny-llama/{COMMIT}-hf", "--store", store, "--models", models, "--trust", keys.trust
    )
    assert code == 0, err
    assert cli("verify", "--models", models, "--trust", keys.trust)[0] == 0


def test_verify_models_names_a_missing_blob_with_exit_4(tmp_path: Path, keys: Keys) -> None:
    models = _installed(tmp_path, keys)
    (models / FOLDER / "snapshots" / COMMIT / "tokenizer.json").resolve().unlink()
    code, out, _ = cli("verify", "--models", models, "--json")
    assert code == 4
    message = json.loads(out)["error"]["message"]
    assert "tokenizer.json" in message and "missing" in message
