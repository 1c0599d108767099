"""``lockbuild build MODEL.toml`` against the fake Hub: the bundle, its reproducibility, its refusals."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys
from hubkit import REPO, tiny_model
from servers import FakeHub

from lockbuild.bundle.read import read_head
from lockbuild.cli import main

SHARD = "model-00001-of-00002.safetensors"


def cli(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args], env=env)
    return r.exit_code, r.stdout, r.stderr


def recipe(tmp: Path, commit: str, extra: str = "") -> Path:
    p = tmp / "tiny.toml"
    p.write_text(
        f'[model]\nname = "tiny-llama"\nrepo = "{REPO}"\nrevision = "{commit}"\nexclude = ["original/*"]\n' + extra
    )
    return p


def build(
    tmp: Path, keys: Keys, commit: str, out: str = "out", extra: str = "", env: dict[str, str] | None = None
) -> dict[str, object]:
    code, stdout, stderr = cli(
        "build", recipe(tmp, commit, extra), "--key", keys.secret, "--out", tmp / out, "--json", env=env
    )
    assert code == 0, stderr
    got: dict[str, object] = json.loads(stdout)["bundles"][0]
    return got


def test_build_then_install_gives_what_huggingface_hub_finds_offline(hub: FakeHub, keys: Keys, tmp_path: Path) -> None:
    from test_models import FOLDER, hub_offline

    files = tiny_model()
    commit = hub.add_repo(REPO, files)
    got = build(tmp_path, keys, commit)
    assert got["commit"] == commit and "pytorch_model.bin" not in got["files"]  # type: ignore[operator]
    bundle = Path(str(got["bundle"]))
    assert bundle.name == f"tiny-llama-{commit}-hf-any.lbz"
    m = read_head(bundle)[0]
    assert m.model is not None and m.model.repo == REPO and m.model.commit == commit
    shard = m.model.file(SHARD)
    assert shard is not None and shard.lfs and shard.sha256 == hashlib.sha256(files[SHARD]).hexdigest()
    config = m.model.file("config.json")
    assert config is not None and not config.lfs
    assert config.blob_id == hashlib.sha1(b"blob %d\0" % len(files["config.json"]) + files["config.json"]).hexdigest()
    models = tmp_path / "models"
    code, _, err = cli("install", bundle, "--models", models, "--trust", keys.trust)
    assert code == 0, err
    out = hub_offline(
        models, f"from huggingface_hub import hf_hub_download\nprint(hf_hub_download({REPO!r}, {SHARD!r}))"
    )
    assert Path(out.strip()).read_bytes() == files[SHARD]
    assert (models / FOLDER / "refs/main").read_text() == commit


def test_same_recipe_same_bytes_with_a_cold_cache_and_a_dropped_connection(
    hub: FakeHub, keys: Keys, tmp_path: Path
) -> None:
    files = tiny_model(extra_bytes=2 << 20)
    commit = hub.add_repo(REPO, files)
    first = build(tmp_path, keys, commit, "a")
    hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())].drop_after = 1_000_000
    again = build(tmp_path, keys, commit, "b", env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "cold")})
    assert first["sha256"] == again["sha256"]
    assert hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())].drop_after is None  # it dropped


def test_the_serial_is_the_commits_date_as_the_hub_states_it(hub: FakeHub, keys: Keys, tmp_path: Path) -> None:
    """A fact of the revision: the same recipe gives the same bytes, and a later commit a higher serial."""
    old = hub.add_repo(REPO, tiny_model(), date="2024-03-05T06:07:08.500Z")
    new = hub.add_repo(REPO, {**tiny_model(), "extra.txt": b"x\n"}, date="2025-06-07T08:09:10Z")
    first = read_head(Path(str(build(tmp_path, keys, old, "a")["bundle"])))[0]
    assert first.serial == 1709618828 and first.as_of == dt.datetime(2024, 3, 5, 6, 7, 8, tzinfo=dt.UTC)
    assert read_head(Path(str(build(tmp_path, keys, new, "b")["bundle"])))[0].serial == 1749283750
    assert build(tmp_path, keys, old, "c")["sha256"] == build(tmp_path, keys, old, "d")["sha256"]


def test_weights_are_stored_uncompressed(hub: FakeHub, keys: Keys, tmp_path: Path) -> None:
    """Noise does not compress either way; a shard of zeros would shrink to nothing if it were compressed.
    Every frame wholly inside the weights is stored (of 8 MiB, at least three of 2 MiB); only the two that
    straddle its ends may be compressed."""
    files = tiny_model()
    files[SHARD] = files[SHARD] + bytes(8 << 20)
    commit = hub.add_repo(REPO, files)
    got = build(tmp_path, keys, commit)
    assert int(str(got["size"])) > 6 << 20
    bundle = str(got["bundle"])
    code, out, err = cli("verify", bundle, "--members", "--trust", keys.trust)  # stored frames decompress
    assert code == 0 and "members match the signed manifest" in out, err
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-t", "-q", bundle], check=True)  # and stock zstd reads them


def test_a_file_that_does_not_match_its_sha256_is_refused_and_nothing_is_signed(
    hub: FakeHub, keys: Keys, tmp_path: Path
) -> None:
    files = tiny_model()
    commit = hub.add_repo(REPO, files)
    hub.cdn.files[hub.cdn_path(hashlib.sha256(files[SHARD]).hexdigest())].corrupt_at = 10
    code, _, err = cli("build", recipe(tmp_path, commit), "--key", keys.secret, "--out", tmp_path / "out")
    assert code == 4, err
    assert "sha256" in err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_branch_name_is_a_recipe_problem(hub: FakeHub, keys: Keys, tmp_path: Path) -> None:
    hub.add_repo(REPO, tiny_model())
    code, _, err = cli("build", recipe(tmp_path, "main"), "--key", keys.secret, "--out", tmp_path / "out")
    assert code == 2 and "model.revision" in err and "commit" in err
    assert hub.requests == []


def test_a_pickle_named_explicitly_is_taken_and_reported(hub: FakeHub, keys: Keys, tmp_path: Path) -> None:
    commit = hub.add_repo(REPO, tiny_model())
    got = build(tmp_path, keys, commit, extra='include = ["*.json", "pytorch_model.bin"]\n')
    assert got["pickles"] == ["pytorch_model.bin"]
    assert any("pickle" in str(w) for w in got["warnings"])  # type: ignore[attr-defined]


def test_the_token_is_written_nowhere(
    hub: FakeHub, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    token = "hf_secret_token_never_written_anywhere"
    monkeypatch.setenv("HF_TOKEN", token)
    commit = hub.add_repo(REPO, tiny_model())
    code, stdout, stderr = cli(
        "build", recipe(tmp_path, commit), "--key", keys.secret, "--out", tmp_path / "out", "--json"
    )
    assert code == 0, stderr
    assert token not in stdout and token not in stderr
    bundle = Path(json.loads(stdout)["bundles"][0]["bundle"])
    raw = subprocess.run(["zstd", "-dc", str(bundle)], capture_output=True, check=True).stdout
    assert token.encode() not in raw and token.encode() not in Path(str(bundle) + ".minisig").read_bytes()


def test_include_star_leaves_out_what_is_not_a_known_safe_format_and_says_so(
    hub: FakeHub, keys: Keys, tmp_path: Path
) -> None:
    files = {
        **tiny_model(),
        "model.ckpt": b"\x80\x04K\x01.",
        "scaler.pickle": b"\x80\x04K\x02.",
        "modeling_tiny.py": b"x = 1\n",
    }
    commit = hub.add_repo(REPO, files)
    got = build(tmp_path, keys, commit, extra='include = ["*"]\n')
    taken = got["files"]
    assert isinstance(taken, list)
    assert not {"model.ckpt", "scaler.pickle", "pytorch_model.bin"} & set(taken)
    assert "modeling_tiny.py" in taken and "README.md" in taken and got["code"] == ["modeling_tiny.py"]
    warnings = "\n".join(map(str, got["warnings"]))  # type: ignore[call-overload]
    assert "model.ckpt" in warnings and "scaler.pickle" in warnings and "pickle or not a known safe format" in warnings
    assert "modeling_tiny.py is code" in warnings
    got = build(tmp_path, keys, commit, out="named", extra='include = ["*.json", "*.ckpt"]\n')
    assert "model.ckpt" in got["files"] and got["pickles"] == ["model.ckpt"]  # type: ignore[operator]
