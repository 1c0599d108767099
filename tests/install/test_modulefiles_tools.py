"""``install``/``remove --modulefiles`` with the real tools: Lmod (Debian's ``lmod``) for Lua files and
Environment Modules (Debian's ``environment-modules``, unpacked by scripts/test since the two packages
conflict) for Tcl files, each in a clean shell with only the tool's init script sourced. scripts/test-as-nobody
runs this file again as an ordinary user."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, TOY_RECIPE, Keys
from servers import FakeServer

from lockbuild.cli import main

LMOD_INIT = Path(os.environ.get("LOCKBUILD_TEST_LMOD_INIT", "/usr/share/lmod/lmod/init/bash"))
EM_PREFIX = Path(os.environ.get("LOCKBUILD_TEST_ENVIRONMENT_MODULES", REPO_ROOT / ".venv" / "environment-modules"))

# Runtime settings a signed recipe may hold (envtable allows them) that would end a string or run code if
# written into a module file as they are.
HOSTILE_ENV = {
    "VLLM_QUOTES": "a\"]] os.execute('touch PWNED') [[\"",
    "VLLM_SHELL": "$(touch PWNED) `touch PWNED` ${HOME}",
    "VLLM_TCL": "[exec touch PWNED] {*}{x} \\ ; }",
}


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


ENV_TABLE = "\n[engine.env]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in HOSTILE_ENV.items()) + "\n"


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def build(recipe_text: str, tmp: Path, keys: Keys, name: str) -> Path:
    recipe = tmp / f"{name}.toml"
    recipe.write_text(recipe_text)
    code, out, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / name), "--json")
    assert code == 0, err
    return Path(json.loads(out)["bundles"][0]["bundle"])


@pytest.fixture(scope="module")
def bundles(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The toy engine 1.0 (day 6, and a newer build of it as of day 25), 1.1, and a 1.0 whose verify fails,
    each with the hostile runtime settings."""
    tmp = tmp_path_factory.mktemp("modbundles")
    base = TOY_RECIPE.replace("\n[[builds]]", ENV_TABLE + "[[builds]]")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        yield {
            "1.0": build(base, tmp, keys, "v10"),
            "1.0-newer": build(base + 'as-of = "2025-01-25T00:00:00Z"\n', tmp, keys, "v10b"),
            "1.1": build(
                base.replace('version = "1.0"', 'version = "1.1"').replace("==1.0", "==1.1"), tmp, keys, "v11"
            ),
            "bad": build(base.replace('"--version"]', '"--fail"]'), tmp, keys, "bad"),
        }


@dataclass(frozen=True)
class Tool:
    fmt: str
    init: Path


@pytest.fixture(params=["lua", "tcl"])
def tool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tool:
    if request.param == "lua":
        if not LMOD_INIT.is_file():
            pytest.skip(f"no Lmod ({LMOD_INIT}); scripts/test installs Debian's lmod")
        return Tool("lua", LMOD_INIT)
    found = sorted(EM_PREFIX.glob("usr/lib/*/modulecmd.tcl"))
    if not found:
        pytest.skip(f"no Environment Modules under {EM_PREFIX}; scripts/test unpacks Debian's environment-modules")
    init = tmp_path_factory.mktemp("em") / "bash"
    text = (EM_PREFIX / "usr/share/modules/init/bash").read_text()
    packaged = "/" + str(found[0].relative_to(EM_PREFIX))
    assert packaged in text
    init.write_text(text.replace(packaged, str(found[0])))  # the package's init script, pointed at the unpacked copy
    return Tool("tcl", init)


def shell(tool: Tool, script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a clean bash (no profile, no rc) with only the tool's init script sourced."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8", "TERM": "dumb", **env}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f". {tool.init}\n{script}"],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def install(bundle: Path, root: Path, keys: Keys, mods: Path, fmt: str, *extra: str) -> tuple[int, str, str]:
    return cli(
        "install", str(bundle), "--root", str(root), "--trust", str(keys.trust),
        "--modulefiles", str(mods), "--modulefiles-format", fmt, *extra,
    )  # fmt: skip


def snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry of a module folder: its mode, and its bytes (a link: where it points)."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes() if p.is_file() else b""
        out[str(p.relative_to(d))] = (st.st_mode, data)
    return out


def default_of(mods: Path, fmt: str) -> str | None:
    d = mods / "toyengine"
    if fmt == "lua":
        return os.readlink(d / "default").removesuffix(".lua") if (d / "default").is_symlink() else None
    v = d / ".version"
    return v.read_text().split("ModulesVersion ")[1].strip().strip('"') if v.exists() else None


def test_module_files_with_the_real_tool(bundles: dict[str, Path], keys: Keys, tool: Tool, tmp_path: Path) -> None:
    root, mods, models, work = tmp_path / "engines", tmp_path / "modules", tmp_path / "models", tmp_path / "work"
    work.mkdir()
    ext = ".lua" if tool.fmt == "lua" else ""
    code, _, err = install(bundles["1.0"], root, keys, mods, tool.fmt, "--models", str(models))
    assert code == 0, err
    f = mods / "toyengine" / f"1.0-cpu{ext}"
    assert stat.S_IMODE(f.stat().st_mode) == 0o644 and f.stat().st_uid == os.geteuid()
    assert default_of(mods, tool.fmt) == "1.0-cpu"
    marker = json.loads((root / "toyengine" / "1.0-cpu" / "lockbuild.json").read_text())
    assert (marker["modulefiles"], marker["modulefiles_format"]) == (str(mods), tool.fmt)

    # avail lists it; load takes the default; the engine runs; every setting is set; unload restores them
    checks = "".join(f'[ "${k}" = {_sh(v)} ] || echo "WRONG {k}"\n' for k, v in HOSTILE_ENV.items())
    ran = shell(
        tool,
        f"module use {mods}\nmodule avail 2>&1\nmodule load toyengine || exit 9\ntoyengine --version || exit 8\n"
        f'echo "OFFLINE=$HF_HUB_OFFLINE CACHE=$HF_HUB_CACHE"\n{checks}module unload toyengine\n'
        'echo "AFTER PATH=$PATH OFFLINE=$HF_HUB_OFFLINE QUOTES=${VLLM_QUOTES-unset}"\n',
        work,
        HF_HUB_OFFLINE="0",
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "toyengine/1.0-cpu" in ran.stdout and "toyengine 1.0" in ran.stdout
    assert f"OFFLINE=1 CACHE={models}" in ran.stdout
    assert "WRONG" not in ran.stdout
    assert "AFTER PATH=/usr/bin:/bin OFFLINE=0 QUOTES=unset" in ran.stdout
    assert not (work / "PWNED").exists()

    # a second version: the default moves to the newest; loading both swaps (Lmod) or is refused (Tcl)
    code, _, err = install(bundles["1.1"], root, keys, mods, tool.fmt)
    assert code == 0, err
    assert default_of(mods, tool.fmt) == "1.1-cpu"
    ran = shell(
        tool,
        f"module use {mods}\nmodule load toyengine/1.0-cpu\nmodule load toyengine/1.1-cpu\necho rc=$?\n"
        'echo "LOADED=$LOADEDMODULES"\ntoyengine --version\n',
        work,
    )
    if tool.fmt == "lua":
        assert "LOADED=toyengine/1.1-cpu\n" in ran.stdout and "toyengine 1.1" in ran.stdout, ran.stdout + ran.stderr
    else:
        assert "rc=1" in ran.stdout and "conflict" in ran.stderr, ran.stdout + ran.stderr
        assert "LOADED=toyengine/1.0-cpu\n" in ran.stdout and "toyengine 1.0" in ran.stdout

    # a failed install leaves every module file and the default exactly as they were
    before = snapshot(mods)
    code, _, err = install(bundles["bad"], root, keys, mods, tool.fmt, "--force")
    assert code != 0 and "verify" in err.lower()
    assert snapshot(mods) == before

    # remove: the file goes, the default moves back; a newer build, then a downgrade, keep it right
    assert cli("remove", "toyengine", "1.1-cpu", "--root", str(root))[0] == 0
    assert not (mods / "toyengine" / f"1.1-cpu{ext}").exists()
    assert default_of(mods, tool.fmt) == "1.0-cpu"
    assert install(bundles["1.0-newer"], root, keys, mods, tool.fmt)[0] == 0
    newer = f.read_text()
    assert install(bundles["1.0"], root, keys, mods, tool.fmt, "--allow-downgrade")[0] == 0
    assert f.read_text() != newer and default_of(mods, tool.fmt) == "1.0-cpu"
    assert cli("remove", "toyengine", "1.0-cpu", "--root", str(root))[0] == 0
    assert default_of(mods, tool.fmt) is None
    ran = shell(tool, f"module use {mods}\nmodule avail 2>&1\n", work)
    assert "toyengine" not in ran.stdout, ran.stdout
    assert [p.name for p in (mods / "toyengine").iterdir()] == []


def _sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def test_a_modulefiles_folder_others_can_write_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    mods, elsewhere = tmp_path / "modules", tmp_path / "elsewhere"
    mods.mkdir()
    mods.chmod(0o777)
    code, _, err = install(bundles["1.0"], tmp_path / "engines", keys, mods, "lua")
    assert code != 0
    assert "--modulefiles" in err and "writable by its group or by others" in err
    assert not (tmp_path / "engines" / "toyengine" / "1.0-cpu").exists()
    assert list(mods.iterdir()) == []
    mods.chmod(0o755)
    elsewhere.mkdir()
    (mods / "toyengine").symlink_to(elsewhere)  # DIR/ENGINE a link: never followed
    code, _, err = install(bundles["1.0"], tmp_path / "engines", keys, mods, "lua")
    assert code != 0 and "symbolic link" in err
    assert list(elsewhere.iterdir()) == []


def test_lockbuild_modulefiles_names_the_folder(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mods = tmp_path / "modules"
    monkeypatch.setenv("LOCKBUILD_MODULEFILES", str(mods))
    root = tmp_path / "engines"
    for b in ("1.0", "1.1"):
        assert cli("install", str(bundles[b]), "--root", str(root), "--trust", str(keys.trust))[0] == 0
    assert (mods / "toyengine" / "1.0-cpu.lua").is_file() and default_of(mods, "lua") == "1.1-cpu"
    monkeypatch.delenv("LOCKBUILD_MODULEFILES")
    shutil.rmtree(root / "toyengine" / "1.1-cpu")  # deleted by hand: its module file no longer counts
    assert cli("remove", "toyengine", "1.0-cpu", "--root", str(root))[0] == 0  # the marker's record
    assert not (mods / "toyengine" / "1.0-cpu.lua").exists()
    assert default_of(mods, "lua") is None
