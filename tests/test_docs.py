"""Every test the threat model names exists, so the document cannot drift from the suite."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_threat_model_names_only_tests_that_exist() -> None:
    text = (ROOT / "docs" / "threat-model.md").read_text()
    refs = re.findall(r"`(test_[a-z_]+\.py)(?:::(test_[a-z0-9_]+)(?:\[[^\]]+\])?)?`", text)
    assert len(refs) >= 60
    missing = []
    for file, name in refs:
        path = ROOT / "tests" / file
        if not path.exists() or (name and not re.search(rf"def {name}\(", path.read_text())):
            missing.append(f"{file}::{name}")
    assert missing == []


def test_readme_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/threat-model.md", "docs/bundle-format.md", "docs/release-engineers.md",
                 "docs/site-administrators.md"):
        assert page in readme
        assert (ROOT / page).exists(), page
