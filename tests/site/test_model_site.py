"""Models through the site path: two revisions of the tiny model in one store (each shared file once), a
delta between them that carries only the changed file, `store list` naming each commit, `install --store`
hard-linking the store's blobs into the Hugging Face cache, and push/pull through a real registry laid
out as a CNCF ModelPack artifact, the trust decision made before any blob is requested."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Keys, make_keys
from hubkit import REPO, tiny_model
from modelkit import COMMIT, model_bundle, recipe_text
from registrykit import RealRegistry, binary
from sitekit import cli, make_bundle

from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.read import read_head
from lockbuild.recipe.modelrecipe import parse_model_recipe
from lockbuild.registry import modelpack
from lockbuild.registry.api import OCI_MANIFEST

NEW_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
CHANGED = "model-00002-of-00002.safetensors"
CHANGED_MEMBER = "model/" + CHANGED
PAD = 256 << 10  # incompressible bytes per shard, so the changed file dominates the delta
FOLDER = "models--" + REPO.replace("/", "--")
needs_registry = pytest.mark.skipif(binary() is None, reason="docker-registry (CNCF distribution) is not installed")


def _files(*, changed: bool) -> dict[str, bytes]:
    files = tiny_model(extra_bytes=PAD)
    if changed:  # the same shard with its last padding byte changed: a new revision that differs in one file
        data = bytearray(files[CHANGED])
        data[-1] ^= 0xFF
        files[CHANGED] = bytes(data)
    return files


@pytest.fixture(scope="module")
def revisions(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> tuple[Path, Path]:
    """OLD (COMMIT) and NEW (NEW_COMMIT) bundles of the tiny model, differing in one shard."""
    base = tmp_path_factory.mktemp("model-revisions")
    old = model_bundle(base / "old", keys.secret, files=_files(changed=False))
    recipe = parse_model_recipe(recipe_text(commit=NEW_COMMIT, extra='exclude = ["original/*"]\n'), "tiny.toml")
    new = model_bundle(base / "new", keys.secret, files=_files(changed=True), recipe=recipe)
    return old.bundle, new.bundle


def _ok(*args: str | Path) -> dict[str, object]:
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _members(bundle: Path) -> dict[str, tuple[str, int]]:
    return {m.path: (m.sha256, m.size) for m in read_head(bundle)[0].members}


def test_two_revisions_keep_each_shared_file_once_and_list_one_row_per_commit(
    tmp_path: Path, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, new = revisions
    store = tmp_path / "store"
    first = _ok("import", old, "--trust", keys.trust, "--store", store)
    second = _ok("import", new, "--trust", keys.trust, "--store", store)
    a, b = _members(old), _members(new)
    changed = {p for p in b if a.get(p) != b[p]}
    assert changed == {CHANGED_MEMBER, "recipe.toml"}  # the shard, and the recipe naming the other commit
    assert second["added_blobs"] == 2 and second["added_bytes"] == sum(b[p][1] for p in changed)
    blobs = sorted(p.name for p in (store / "blobs" / "sha256").iterdir())
    assert blobs == sorted({s for s, _ in (*a.values(), *b.values())})  # the shared files once each
    assert len(blobs) == first["members"] + len(changed)  # type: ignore[operator]
    engine = make_bundle(tmp_path / "engine", [keys.secret])
    _ok("import", engine, "--trust", keys.trust, "--store", store)
    listed = _ok("store", "list", "--store", store)
    rows = {str(r["build"]): r for r in listed["builds"]}  # type: ignore[attr-defined]
    for commit in (COMMIT, NEW_COMMIT):
        row = rows[f"tiny-llama/{commit}-hf"]
        assert row["commit"] == commit and row["repo"] == REPO and row["kind"] == "model" and row["complete"]
    engine_row = rows["toyengine/1.0-cpu"]  # an engine's row: no model fields (its vulnerability report's counts)
    assert set(engine_row) == {
        "vulnerabilities",
        "build",
        "engine",
        "version",
        "variant",
        "platform",
        "serial",
        "members",
        "present",
        "complete",
        "size",
    }
    text = cli("store", "list", "--store", store)
    assert text.exit_code == 0 and f"tiny-llama/{NEW_COMMIT}-hf" in text.output and f"model {REPO}" in text.output


def test_a_delta_carries_only_the_changed_file_and_completes_a_store_holding_old(
    tmp_path: Path, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, new = revisions
    store = tmp_path / "store"
    _ok("import", old, "--trust", keys.trust, "--store", store)
    cut = _ok("delta", new, "--base", old, "--out", tmp_path / "deltas", "--trust", keys.trust)
    changed = _members(new)[CHANGED_MEMBER][1]
    assert cut["included"] == 2  # the changed shard and the recipe
    assert changed <= int(cut["size"]) <= changed + (16 << 10)  # type: ignore[call-overload]
    assert int(cut["size"]) < int(cut["full_size"]) / 2  # type: ignore[call-overload]
    delta = Path(str(cut["delta"]))
    done = _ok("import", delta, "--trust", keys.trust, "--store", store)
    assert done["build"] == f"tiny-llama/{NEW_COMMIT}-hf" and done["added_blobs"] == 2
    models = tmp_path / "models"
    _ok("install", f"tiny-llama/{NEW_COMMIT}-hf", "--store", store, "--models", models, "--trust", keys.trust)
    assert (models / FOLDER / "refs" / "main").read_text() == NEW_COMMIT
    assert cli("verify", "--models", models, "--trust", keys.trust).exit_code == 0


def test_a_delta_into_a_store_without_old_names_what_is_missing(
    tmp_path: Path, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, new = revisions
    cut = _ok("delta", new, "--base", old, "--out", tmp_path / "deltas", "--trust", keys.trust)
    r = cli("import", str(cut["delta"]), "--trust", keys.trust, "--store", tmp_path / "empty")
    assert r.exit_code != 0 and "config.json" in r.output
    assert not (tmp_path / "empty" / "builds" / "tiny-llama").exists()


def test_install_from_the_store_hard_links_the_model_blobs(
    tmp_path: Path, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, _ = revisions
    store = tmp_path / "store"
    _ok("import", old, "--trust", keys.trust, "--store", store)
    models = tmp_path / "models"
    _ok("install", f"tiny-llama/{COMMIT}-hf", "--store", store, "--models", models, "--trust", keys.trust)
    manifest = parse_manifest((store / "builds" / "tiny-llama" / f"{COMMIT}-hf" / "bundle.toml").read_bytes())
    assert manifest.model is not None
    for f in manifest.model.files:
        placed = (models / FOLDER / "blobs" / f.cache_name).stat()
        blob = (store / "blobs" / "sha256" / f.sha256).stat()
        assert (placed.st_dev, placed.st_ino) == (blob.st_dev, blob.st_ino), f.repo_path  # the store's file
    assert cli("verify", "--models", models, "--trust", keys.trust).exit_code == 0


# --- through a registry, as a ModelPack artifact -------------------------------------------------------


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    if binary() is None:
        pytest.skip("docker-registry (CNCF distribution) is not installed")
    r = RealRegistry(tmp_path_factory.mktemp("model-registry"))
    yield r
    r.close()


def _oci(reg: RealRegistry, repo: str, tag: str) -> dict[str, object]:
    r = httpx.get(f"http://{reg.host}/v2/{repo}/manifests/{tag}", headers={"Accept": OCI_MANIFEST})
    assert r.status_code == 200
    return dict(r.json())


@needs_registry
def test_push_lays_a_model_out_as_modelpack(reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]) -> None:
    old, _ = revisions
    pushed = _ok("push", old, reg.ref("models/tiny", "v1"), "--trust", keys.trust)
    head = read_head(old)[0]
    doc = _oci(reg, "models/tiny", "v1")
    assert doc["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    config = doc["config"]
    assert isinstance(config, dict) and config["mediaType"] == "application/vnd.cncf.model.config.v1+json"
    layers = doc["layers"]
    assert isinstance(layers, list) and head.model is not None
    by_path = {x["annotations"]["org.cncf.model.filepath"]: x for x in layers if "annotations" in x}
    assert sorted(by_path) == sorted(f.repo_path for f in head.model.files)  # one raw layer per file
    for f in head.model.files:
        layer = by_path[f.repo_path]
        assert layer["digest"] == f"sha256:{f.sha256}" and layer["size"] == f.size
        assert layer["annotations"]["org.opencontainers.image.title"] == f.repo_path
    media = {p: x["mediaType"] for p, x in by_path.items()}
    assert media[CHANGED] == "application/vnd.cncf.model.weight.v1.raw"
    assert media["config.json"] == media["tokenizer.json"] == "application/vnd.cncf.model.weight.config.v1.raw"
    signed = [x for x in layers if x["mediaType"] == "application/vnd.lockbuild.manifest.v1+toml"]
    manifest_bytes = httpx.get(f"http://{reg.host}/v2/models/tiny/blobs/{signed[0]['digest']}").content
    assert len(signed) == 1 and parse_manifest(manifest_bytes) == head
    notes = doc["annotations"]
    assert isinstance(notes, dict) and notes["dev.lockbuild.bundle"] == old.name
    assert notes["dev.lockbuild.signatures"] == Path(f"{old}.minisig").read_text()
    model_config = httpx.get(f"http://{reg.host}/v2/models/tiny/blobs/{config['digest']}").json()
    assert model_config["descriptor"]["revision"] == COMMIT
    assert set(model_config) == {"descriptor", "config", "modelfs"}  # the schema's keys, none else
    assert set(model_config["descriptor"]) <= {
        "createdAt",
        "authors",
        "family",
        "name",
        "docURL",
        "sourceURL",
        "version",
        "revision",
        "vendor",
        "licenses",
        "title",
        "description",
    }
    assert model_config["config"] == {"format": "safetensors"}
    assert model_config["modelfs"] == {"type": "layers", "diff_ids": [x["digest"] for x in layers]}
    assert pushed["blobs"] == len(head.members)


@needs_registry
def test_pull_a_model_into_a_fresh_store_and_install_it(
    tmp_path: Path, reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, new = revisions
    _ok("push", old, reg.ref("models/pull", "old"), "--trust", keys.trust)
    _ok("push", new, reg.ref("models/pull", "new"), "--trust", keys.trust)
    store = tmp_path / "store"
    pulled = _ok("pull", reg.ref("models/pull", "old"), "--store", store, "--trust", keys.trust)
    assert pulled["build"] == f"tiny-llama/{COMMIT}-hf" and pulled["fetched"] == len(_members(old))
    reg.mark()
    again = _ok("pull", reg.ref("models/pull", "new"), "--store", store, "--trust", keys.trust)
    assert again["fetched"] == 2  # the second revision: only its changed shard and recipe
    changed = {"sha256:" + _members(new)[p][0] for p in (CHANGED_MEMBER, "recipe.toml")}
    assert set(reg.blob_gets()) - changed == {f"sha256:{hashlib.sha256(_manifest_bytes(new)).hexdigest()}"}
    models = tmp_path / "models"
    for commit in (COMMIT, NEW_COMMIT):
        _ok("install", f"tiny-llama/{commit}-hf", "--store", store, "--models", models, "--trust", keys.trust)
    assert cli("verify", "--models", models, "--trust", keys.trust).exit_code == 0
    assert cli("store", "verify", "--store", store).exit_code == 0


@needs_registry
def test_push_a_model_from_a_store(tmp_path: Path, reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]) -> None:
    old, _ = revisions
    store = tmp_path / "store"
    _ok("import", old, "--trust", keys.trust, "--store", store)
    _ok("push", f"tiny-llama/{COMMIT}-hf", reg.ref("models/fromstore", "v1"), "--store", store, "--trust", keys.trust)
    doc = _oci(reg, "models/fromstore", "v1")
    assert doc["artifactType"] == modelpack.ARTIFACT_TYPE
    _ok("push", old, reg.ref("models/fromstore", "file"), "--trust", keys.trust)
    assert doc == _oci(reg, "models/fromstore", "file")  # the same artifact as pushed from the .lbz


def _manifest_bytes(bundle: Path) -> bytes:
    return read_head(bundle)[0].to_toml()


@needs_registry
def test_an_untrusted_model_artifact_is_refused_before_any_blob_is_requested(
    tmp_path: Path, reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, _ = revisions
    target = reg.ref("models/untrusted", "v1")
    _ok("push", old, target, "--trust", keys.trust)
    stranger = make_keys(tmp_path / "stranger")
    reg.mark()
    r = cli("pull", target, "--store", tmp_path / "store", "--trust", stranger.trust)
    assert r.exit_code == 3 and "signature policy not met" in r.output
    requests = reg.requests()
    assert [q.method for q in requests] == ["GET"] and "/manifests/" in requests[0].path
    assert reg.blob_gets() == [] and not (tmp_path / "store").exists()


@needs_registry
def test_a_model_artifact_naming_another_manifest_or_two_is_refused_before_any_blob(
    tmp_path: Path, reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    old, new = revisions
    _ok("push", old, reg.ref("models/mixed", "old"), "--trust", keys.trust)
    _ok("push", new, reg.ref("models/mixed", "new"), "--trust", keys.trust)
    old_doc, new_doc = _oci(reg, "models/mixed", "old"), _oci(reg, "models/mixed", "new")
    kind = "application/vnd.lockbuild.manifest.v1+toml"
    new_signed = next(x for x in new_doc["layers"] if x["mediaType"] == kind)  # type: ignore[attr-defined]
    swapped = {**old_doc, "layers": [new_signed if x["mediaType"] == kind else x for x in old_doc["layers"]]}  # type: ignore[attr-defined]
    doubled = {**old_doc, "layers": [*old_doc["layers"], new_signed]}  # type: ignore[list-item]
    for tag, doc, said in (("swapped", swapped, "its signatures sign"), ("doubled", doubled, "not a lockbuild")):
        url = f"http://{reg.host}/v2/models/mixed/manifests/{tag}"
        assert httpx.put(url, content=json.dumps(doc), headers={"Content-Type": OCI_MANIFEST}).status_code == 201
        reg.mark()
        r = cli("pull", reg.ref("models/mixed", tag), "--store", tmp_path / tag, "--trust", keys.trust)
        assert r.exit_code != 0 and said in r.output, (tag, r.output)
        assert reg.blob_gets() == [], tag


@needs_registry
def test_an_edited_modelpack_view_points_a_node_at_nothing_else(
    tmp_path: Path, reg: RealRegistry, keys: Keys, revisions: tuple[Path, Path]
) -> None:
    """The layers' filepath annotations swapped between two files, and the model config replaced: pull
    fetches what the signed manifest lists, so the installed cache holds each file's signed bytes."""
    old, _ = revisions
    _ok("push", old, reg.ref("models/view", "v1"), "--trust", keys.trust)
    doc = _oci(reg, "models/view", "v1")
    layers = [dict(x) for x in doc["layers"]]  # type: ignore[attr-defined]
    a, b = (x for x in layers if x.get("annotations", {}).get(modelpack.FILEPATH) in ("config.json", CHANGED))
    a["annotations"], b["annotations"] = b["annotations"], a["annotations"]
    blob = b'{"descriptor": {"name": "other"}, "config": {}, "modelfs": {"type": "layers", "diff_ids": []}}'
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    start = httpx.post(f"http://{reg.host}/v2/models/view/blobs/uploads/")
    where = httpx.URL(f"http://{reg.host}").join(start.headers["Location"])
    up = httpx.put(
        where.copy_merge_params({"digest": digest}), content=blob, headers={"Content-Type": "application/octet-stream"}
    )
    assert up.status_code == 201
    edited = {
        **doc,
        "layers": layers,
        "config": {
            **doc["config"],
            "digest": digest,  # type: ignore[dict-item]
            "size": len(blob),
        },
    }
    url = f"http://{reg.host}/v2/models/view/manifests/edited"
    assert httpx.put(url, content=json.dumps(edited), headers={"Content-Type": OCI_MANIFEST}).status_code == 201
    store, models = tmp_path / "store", tmp_path / "models"
    _ok("pull", reg.ref("models/view", "edited"), "--store", store, "--trust", keys.trust)
    _ok("install", f"tiny-llama/{COMMIT}-hf", "--store", store, "--models", models, "--trust", keys.trust)
    snapshot = models / FOLDER / "snapshots" / COMMIT
    files = _files(changed=False)
    for name in ("config.json", CHANGED):
        assert (snapshot / name).read_bytes() == files[name]
    assert cli("verify", "--models", models, "--trust", keys.trust).exit_code == 0


def test_media_types_follow_what_each_file_is() -> None:
    assert modelpack.media_type("model-00001-of-00002.safetensors") == modelpack.WEIGHT
    assert modelpack.media_type("gguf/tiny.Q4_K_M.gguf") == modelpack.WEIGHT
    assert modelpack.media_type("tokenizer_config.json") == modelpack.WEIGHT_CONFIG
    assert modelpack.media_type("vocab.txt") == modelpack.WEIGHT_CONFIG
    assert modelpack.media_type("LICENSE") == modelpack.DOC
    assert modelpack.media_type("modeling_tiny.py") == modelpack.CODE
    assert modelpack.weight_format(["a.safetensors", "config.json"]) == {"format": "safetensors"}
    assert modelpack.weight_format(["a.safetensors", "b.gguf"]) == {}  # two formats: none claimed
    assert modelpack.weight_format(["weights.npz"]) == {}  # a format ModelPack has no name for


def test_only_the_modelpack_module_spells_the_modelpack_layout() -> None:
    """One place for the layout: the ModelPack media types and annotation keys appear in registry/modelpack.py
    only (push and pull call it), so a second, drifting copy of the layout cannot appear."""
    package = Path(modelpack.__file__).parent.parent
    spelled = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "application/vnd.cncf.model" in p.read_text() or "org.cncf.model" in p.read_text()
    )
    assert spelled == ["registry/modelpack.py"]
