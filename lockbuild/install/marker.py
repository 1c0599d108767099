"""lockbuild.json: the marker in every installed environment, and listing what is installed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MARKER = "lockbuild.json"
RECORD_DIR = "lockbuild"


@dataclass(frozen=True)
class Installed:
    engine: str
    version: str
    variant: str
    binary: str
    requirements: tuple[str, ...]
    exclude_newer: str
    uv: str
    installed: str
    bundle: str
    bundle_sha256: str
    serial: int
    signers: tuple[str, ...]
    python: str
    platform: str
    lockbuild: str

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["requirements"] = list(self.requirements)
        d["signers"] = list(self.signers)
        return d


def read_marker(env_dir: Path) -> Installed | None:
    """The marker of an installed environment; None where there is none or it is unreadable."""
    try:
        data = json.loads((env_dir / MARKER).read_text(encoding="utf-8"))
        data["requirements"] = tuple(data["requirements"])
        data["signers"] = tuple(data["signers"])
        return Installed(**data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_installed(root: Path) -> list[tuple[Path, Installed]]:
    out: list[tuple[Path, Installed]] = []
    if not root.is_dir():
        return out
    for engine_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for env in sorted(p for p in engine_dir.iterdir() if p.is_dir() and not p.name.endswith(".partial")):
            marker = read_marker(env)
            if marker is not None:
                out.append((env, marker))
    return out
