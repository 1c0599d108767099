"""What a person reads after a build: counts that agree with each other."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner
from conftest import Keys

from lockbuild.cli import main


def test_packing_and_built_lines_count_the_same_files(env: object, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist")], catch_exceptions=False
    )
    assert r.exit_code == 0, r.stderr
    packing = re.search(r"lockbuild: (?:downloading and )?packing: (\d+) file\(s\)", r.stderr)
    built = re.search(r"^built \S+ \([\d.]+ MB, (\d+) files with the manifest\)$", r.stdout, re.M)
    assert packing and built, (r.stdout, r.stderr)
    assert packing[1] == built[1]
    fetched = re.search(r"lockbuild: fetched (\d+) files?: (\d+) downloaded\b.*?, (\d+) from the cache", r.stderr)
    assert fetched, r.stderr
    assert int(fetched[1]) == int(fetched[2]) + int(fetched[3])
