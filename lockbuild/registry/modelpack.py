"""A model bundle in a registry, laid out as the CNCF ModelPack specification has it (pure, no I/O).

One raw layer per model file and a ModelPack configuration (docs/site-administrators.md), plus lockbuild's
recipe member and signed manifest as untitled layers. ``pull`` trusts only the signed manifest: the ModelPack
layers and configuration are a view for other tools (KitOps, Harbor, ORAS), never trusted."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.modelformat import role
from lockbuild.bundle.modelformat import weight_format as format_of_weights
from lockbuild.errors import LockbuildError
from lockbuild.registry.api import OCI_MANIFEST

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"
FILEPATH = "org.cncf.model.filepath"
TITLE = "org.opencontainers.image.title"
HUB = "https://huggingface.co/"
_MEDIA = {"weight": WEIGHT, "code": CODE, "doc": DOC, "config": WEIGHT_CONFIG}


def media_type(repo_path: str) -> str:
    """The ModelPack media type of a model file, by its name: weights (the suffixes written in stored
    frames), code, documentation, or else weight configuration (config.json, the tokenizer, indexes)."""
    return _MEDIA[role(repo_path)]


def weight_format(repo_paths: list[str]) -> dict[str, str]:
    """ModelPack's ``config.format`` where every weight file has one format (else nothing is claimed)."""
    found = {format_of_weights(p) for p in repo_paths if role(p) == "weight"}
    return {"format": found.pop()} if len(found) == 1 and "" not in found else {}


def _descriptor(media: str, sha256: str, size: int, annotations: Mapping[str, str] | None = None) -> dict[str, object]:
    out: dict[str, object] = {"mediaType": media, "digest": f"sha256:{sha256}", "size": size}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def model_artifact(
    manifest: Manifest, manifest_bytes: bytes, annotations: Mapping[str, str], *, manifest_type: str, member_type: str
) -> tuple[bytes, bytes]:
    """The OCI manifest of a model bundle's artifact and its ModelPack configuration blob (both
    deterministic: the same signed build gives the same bytes)."""
    table = manifest.model
    if table is None:
        raise LockbuildError(f"internal: {manifest.bundle_name} is not a model bundle; it has no ModelPack layout.")
    model_files = {f.member for f in table.files}
    layers = [
        _descriptor(media_type(f.repo_path), f.sha256, f.size, {FILEPATH: f.repo_path, TITLE: f.repo_path})
        for f in table.files
    ]
    seen: set[str] = set()
    for m in manifest.members:  # the recipe: fetched by pull as a member, untitled for other tools
        if m.path not in model_files and m.sha256 not in seen:
            seen.add(m.sha256)
            layers.append(_descriptor(member_type, m.sha256, m.size))
    layers.append(_descriptor(manifest_type, hashlib.sha256(manifest_bytes).hexdigest(), len(manifest_bytes)))
    config = {
        "descriptor": {
            "name": manifest.engine,
            "version": table.commit,
            "revision": table.commit,
            "sourceURL": HUB + table.repo,
        },
        "config": weight_format([f.repo_path for f in table.files]),
        "modelfs": {"type": "layers", "diff_ids": [str(x["digest"]) for x in layers]},
    }
    config_bytes = json.dumps(config, indent=1, sort_keys=True).encode()
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": _descriptor(CONFIG_TYPE, hashlib.sha256(config_bytes).hexdigest(), len(config_bytes)),
        "layers": layers,
        "annotations": dict(annotations),
    }
    return json.dumps(doc, indent=1, sort_keys=True).encode(), config_bytes


def signed_manifest_layer(doc: Mapping[str, object], manifest_type: str) -> Mapping[str, object] | None:
    """The one layer of a ModelPack artifact that holds lockbuild's signed manifest (None: none, several,
    or a config that is not ModelPack's). What it names is checked against the signatures before use."""
    config, layers = doc.get("config"), doc.get("layers")
    if not isinstance(config, dict) or config.get("mediaType") != CONFIG_TYPE or not isinstance(layers, list):
        return None
    found = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == manifest_type]
    return found[0] if len(found) == 1 else None
