"""Issue 15: runtime settings ([engine.env]) every entry point sees, and the self-test (`lockbuild test`)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, Keys, day, uv_wheel
from servers import FakeServer, make_wheel

from lockbuild.bundle.instructions import InstallTable, parse_install
from lockbuild.bundle.manifest import toml_string
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RecipeError
from lockbuild.recipe import parse_recipe

ENGINE = '''\
import os
import socket
import sys


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        print("netengine 1.0")
    elif args == ["--env"]:
        print(os.environ.get("NETENGINE_MODE", "<unset>"), os.environ.get("HF_HUB_OFFLINE", "<unset>"))
    elif args == ["--smoke"]:  # quietly tries a connection, then falls back: the case the self-test exists for
        try:
            socket.create_connection(("10.255.255.1", 8080), timeout=2).close()
            print("fetched")
        except OSError:
            print("offline: falling back")
    else:
        print("netengine ok")
'''

RECIPE = f'''\
[engine]
name = "netengine"
pypi = "netengine"
binary = "netengine"
verify = ["netengine", "--version"]
{{extra}}
[engine.env]
NETENGINE_MODE = "offline it's $HOME `x`"
HF_HUB_OFFLINE = "1"

[[builds]]
version = "1.0"
variant = "{{variant}}"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["netengine==1.0"]
'''


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _build(tmp: Path, keys: Keys, variant: str, extra: str = "") -> Path:
    recipe = tmp / f"{variant}.toml"
    recipe.write_text(RECIPE.format(extra=extra, variant=variant))
    code, out, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / variant), "--json")
    assert code == 0, err
    return Path(json.loads(out)["bundles"][0]["bundle"])


@pytest.fixture(scope="module")
def bundles(blank_server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    s = blank_server
    s.reset()
    s.publish(*uv_wheel(), uploaded=day(1))
    s.publish(*make_wheel("netengine", "1.0", modules={"netengine/__init__.py": ENGINE},
                          scripts={"netengine": "netengine:main"}), uploaded=day(1))  # fmt: skip
    tmp = tmp_path_factory.mktemp("netengine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", s.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        yield {
            "plain": _build(tmp, keys, "plain"),
            "quiet": _build(tmp, keys, "quiet", 'smoke = ["netengine", "--quiet"]'),
            "net": _build(tmp, keys, "net", 'smoke = ["netengine", "--smoke"]'),
            "allowed": _build(tmp, keys, "allowed", 'smoke = ["netengine", "--smoke"]\nallow-network = ["10.255.255.1"]'),
        }


# --- [engine.env] -----------------------------------------------------------------------------------


def test_env_values_reach_the_binary_started_directly(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, _, err = cli("install", str(bundles["plain"]), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, err
    env_dir = root / "netengine" / "1.0-plain"
    # no activation, an empty environment: the console script alone must see the settings
    out = subprocess.run([str(env_dir / "bin" / "netengine"), "--env"], env={}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "offline it's $HOME `x` 1"
    # an operator's own value wins for one run
    out = subprocess.run([str(env_dir / "bin" / "netengine"), "--env"], env={"HF_HUB_OFFLINE": "0"},
                         capture_output=True, text=True)  # fmt: skip
    assert out.stdout.strip().endswith(" 0")
    # and an activated shell exports them to any program
    sh = f'. "{env_dir}/bin/activate" && printf "%s|%s" "$NETENGINE_MODE" "$HF_HUB_OFFLINE"'
    out = subprocess.run(["sh", "-c", sh], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.stdout == "offline it's $HOME `x`|1", out.stderr
    # list and inspect show them
    code, out_text, _ = cli("list", "--root", str(root))
    assert "env HF_HUB_OFFLINE=1" in out_text
    code, out_json, _ = cli("list", "--root", str(root), "--json")
    assert json.loads(out_json)["installed"][0]["env"]["HF_HUB_OFFLINE"] == "1"
    code, out_text, _ = cli("inspect", str(bundles["plain"]))
    assert "install: env: HF_HUB_OFFLINE=1 NETENGINE_MODE=" in out_text
    code, out_json, _ = cli("inspect", str(bundles["plain"]), "--json")
    assert json.loads(out_json)["install"]["env"] == {"HF_HUB_OFFLINE": "1", "NETENGINE_MODE": "offline it's $HOME `x`"}


def test_the_verify_command_runs_with_the_env(bundles: dict[str, Path]) -> None:
    from lockbuild.install.runenv import engine_env

    env = engine_env(Path("/x"), {"HOME": "/h"}, (("HF_HUB_OFFLINE", "1"),))
    assert env["HF_HUB_OFFLINE"] == "1" and env["HOME"] == "/h"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('hf_offline = "1"', "expected a name like"),
        ('"1X" = "1"', "expected a name like"),
        ('"A-B" = "1"', "expected a name like"),
        ('LD_PRELOAD = "/tmp/x.so"', "steers the loader"),
        ('PYTHONPATH = "/tmp"', "steers the loader"),
        ('PATH = "/tmp"', "steers the loader"),
        ("A = 1", "expected a string value"),
        ('A = "x\\ny"', "control character"),
        ('A = "x\\u0000"', "control character"),
        ('A = "\\u001b[31m"', "control character"),
    ],
)
def test_bad_env_entries_are_refused_by_the_recipe(line: str, expected: str) -> None:
    text = RECIPE.format(extra="", variant="v").replace('HF_HUB_OFFLINE = "1"', line)
    with pytest.raises(RecipeError) as exc:
        parse_recipe(text)
    assert expected in exc.value.message


def _table(**extra: object) -> dict[str, object]:
    return {"binary": "e", "verify": ["e"], "gpu-probe": "none", "uv": "tools/uv.whl", **extra}


def test_the_manifest_env_round_trips_and_is_parsed_strictly() -> None:
    t = InstallTable("e", ("e",), "none", "tools/uv.whl", env=(("A", "x y'\"$"), ("HF_HUB_OFFLINE", "1")),
                     smoke=("e", "--smoke"), allow_network=("example.org",))  # fmt: skip
    import tomllib

    data = tomllib.loads("\n".join(t.toml_lines(toml_string)))
    assert parse_install(data["install"], {"tools/uv.whl": "tool"}) == t
    for bad in ({"env": {"LD_PRELOAD": "x"}}, {"env": {"A": "x\ny"}}, {"env": {"a": "1"}}, {"env": ["A=1"]},
                {"smoke": ["e", "\x1b[2J"]}, {"allow-network": ["http://x/"]}, {"allow-network": [1]}):  # fmt: skip
        with pytest.raises(IntegrityError):
            parse_install(_table(**bad), {"tools/uv.whl": "tool"})
