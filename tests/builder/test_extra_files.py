"""``extra-files``: a checked file placed inside the environment, and ``{prefix}`` in [engine.env]."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TOY_RECIPE, Keys, publish_toy
from servers import FakeServer

from lockbuild.cli import main
from lockbuild.envtable import expand_prefix, problem
from lockbuild.errors import RecipeError
from lockbuild.recipe import parse_recipe

ENCODING = b"aGVsbG8= 0\nd29ybGQ= 1\n"
SHA = hashlib.sha256(ENCODING).hexdigest()


def recipe_text(url: str, sha: str = SHA, dest: str = "share/tiktoken/o200k_base.tiktoken") -> str:
    head, builds = TOY_RECIPE.split("[[builds]]")
    env = '[engine.env]\nTIKTOKEN_ENCODINGS_BASE = "{prefix}/share/tiktoken"\n\n'
    return f'{head}{env}[[builds]]{builds}extra-files = [{{ url = "{url}", sha256 = "{sha}", dest = "{dest}" }}]\n'


@pytest.fixture
def files(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    publish_toy(srv)
    srv.add_file("/enc/o200k_base.tiktoken", ENCODING)
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    return srv


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_an_extra_file_is_placed_in_the_environment_that_prefix_points_at(
    files: FakeServer, tmp_path: Path, keys: Keys
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(recipe_text(f"{files.url}/enc/o200k_base.tiktoken"))
    code, out, err = cli("--json", "build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist"))
    assert code == 0, err
    bundle = Path(json.loads(out)["bundles"][0]["bundle"])
    code, out, err = cli("--json", "inspect", str(bundle))
    shown = json.loads(out)
    member = next(f for f in shown["files"] if f["kind"] == "extra-file")
    assert (member["path"], member["sha256"]) == ("extra-files/share/tiktoken/o200k_base.tiktoken", SHA)
    assert shown["install"]["extra_files"] == [{"member": member["path"], "dest": "share/tiktoken/o200k_base.tiktoken"}]
    root = tmp_path / "engines"
    code, out, err = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, err
    env_dir = root / "toyengine" / "1.0-cpu"
    assert (env_dir / "share" / "tiktoken" / "o200k_base.tiktoken").read_bytes() == ENCODING
    (settings,) = env_dir.glob("lib/python*/site-packages/_lockbuild_env.py")
    assert f"('TIKTOKEN_ENCODINGS_BASE', '{env_dir}/share/tiktoken')" in settings.read_text()
    assert ".partial" not in settings.read_text() and "{prefix}" not in settings.read_text()
    activate = (env_dir / "bin" / "activate").read_text()
    assert f"TIKTOKEN_ENCODINGS_BASE='{env_dir}/share/tiktoken'" in activate or (
        f"TIKTOKEN_ENCODINGS_BASE={env_dir}/share/tiktoken;" in activate
    )


def test_an_extra_file_that_is_not_the_recipes_sha256_stops_the_build(
    files: FakeServer, tmp_path: Path, keys: Keys
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(recipe_text(f"{files.url}/enc/o200k_base.tiktoken", sha="0" * 64))
    code, _, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist"))
    assert code != 0 and "sha256" in err
    assert not list((tmp_path / "dist").glob("*.lbz")) if (tmp_path / "dist").exists() else True


@pytest.mark.parametrize(
    ("dest", "why"),
    [
        ("../outside", "'..' path component"),
        ("/etc/passwd", "an absolute path"),
        ("bin/python3", "interpreter or activation script"),
        ("pyvenv.cfg", "a file of the environment itself"),
        ("lib/python3.12/site-packages/x.pth", "belongs to the environment's own packages"),
    ],
)
def test_an_extra_file_outside_the_environment_or_over_its_own_files_is_refused(dest: str, why: str) -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(recipe_text("https://x.invalid/f", dest=dest))
    assert any("extra-files[0].dest" in p and why in p for p in info.value.problems), info.value.problems


def test_two_extra_files_at_one_place_are_refused() -> None:
    text = recipe_text("https://x.invalid/f").replace(
        " }]\n",
        ' }, { url = "https://x.invalid/g", sha256 = "' + SHA + '", dest = "share/tiktoken/O200K_base.tiktoken" }]\n',
    )
    with pytest.raises(RecipeError, match="collides"):
        parse_recipe(text)


def test_prefix_is_expanded_and_the_expanded_value_checked_again() -> None:
    env = (("TIKTOKEN_ENCODINGS_BASE", "{prefix}/share/tiktoken"), ("HF_HUB_OFFLINE", "1"))
    assert expand_prefix(env, "/opt/e/1.0", allow_network=()) == (
        ("TIKTOKEN_ENCODINGS_BASE", "/opt/e/1.0/share/tiktoken"),
        ("HF_HUB_OFFLINE", "1"),
    )
    with pytest.raises(ValueError, match="control character"):
        expand_prefix(env, "/opt/e\n/1.0", allow_network=())
    with pytest.raises(ValueError, match="allow-network"):  # a prefix that makes a value an address
        expand_prefix((("HF_ENDPOINT", "{prefix}"),), "http://evil.invalid", allow_network=())


def test_tiktoken_settings_join_the_allow_list() -> None:
    assert problem("TIKTOKEN_ENCODINGS_BASE", "{prefix}/share/tiktoken", allow_network=()) is None
    assert problem("TIKTOKEN_CACHE_DIR", "/var/cache/tiktoken", allow_network=()) is None


BASE_INSTALL = {"binary": "e", "verify": ["e"], "gpu-probe": "none", "uv": "tools/uv.whl"}
KINDS = {"tools/uv.whl": "tool", "extra-files/x/enc": "extra-file", "wheels/a.whl": "wheel"}


@pytest.mark.parametrize(
    ("place", "why"),
    [
        ({"member": "extra-files/x/enc", "dest": "bin/python"}, "interpreter or activation script"),
        ({"member": "extra-files/x/enc", "dest": "../../etc/cron.d/x"}, "not a plain relative path"),
        ({"member": "wheels/a.whl", "dest": "share/a.whl"}, "not a member of kind extra-file"),
    ],
)
def test_a_manifest_that_places_an_extra_file_badly_is_refused(place: dict[str, str], why: str) -> None:
    from lockbuild.bundle.installparse import parse_install
    from lockbuild.errors import IntegrityError

    with pytest.raises(IntegrityError, match=why):
        parse_install({**BASE_INSTALL, "extra-files": [place]}, KINDS)
    ok = parse_install({**BASE_INSTALL, "extra-files": [{"member": "extra-files/x/enc", "dest": "share/x"}]}, KINDS)
    assert ok.needs_format == 5


def test_a_manifest_of_an_older_format_that_carries_extra_files_is_refused() -> None:
    import dataclasses

    from hostile import GOOD_FILES, INSTALL, manifest, member

    from lockbuild.bundle.instructions import ExtraPlace
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.errors import IntegrityError

    extra = member("extra-files/share/enc", ENCODING, "extra-file")
    install = dataclasses.replace(INSTALL, extra_files=(ExtraPlace(extra.path, "share/enc"),))
    m = manifest([*(member(p, d, k) for p, d, k in GOOD_FILES), extra], install=install)
    text = m.to_toml()
    assert b"format = 5\n" in text and parse_manifest(text).install.extra_files == install.extra_files
    with pytest.raises(IntegrityError, match="carries what format 5 adds"):
        parse_manifest(text.replace(b"format = 5\n", b"format = 3\n"))


def tiktoken_wheel(digest: str) -> tuple[str, bytes]:
    from servers import make_wheel

    source = (
        "def o200k_base():\n    mergeable_ranks = load_tiktoken_bpe(\n"
        '        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",\n'
        f'        expected_hash="{digest}",\n    )\n'
    )
    return make_wheel(
        "tiktoken", "0.14.0", modules={"tiktoken/__init__.py": "", "tiktoken_ext/openai_public.py": source}
    )


@pytest.mark.parametrize("agrees", [True, False])
def test_the_lock_checks_an_encoding_against_the_digest_tiktoken_publishes(
    files: FakeServer, tmp_path: Path, agrees: bool
) -> None:
    from conftest import day

    other = b"another file at the same name\n"
    files.add_file("/enc2/o200k_base.tiktoken", other)
    files.publish(*tiktoken_wheel(SHA), uploaded=day(1))
    url, sha = (
        (f"{files.url}/enc/o200k_base.tiktoken", SHA)
        if agrees
        else (f"{files.url}/enc2/o200k_base.tiktoken", hashlib.sha256(other).hexdigest())
    )
    recipe = tmp_path / "r.toml"
    recipe.write_text(recipe_text(url, sha=sha).replace('"toyengine==1.0"]', '"toyengine==1.0", "tiktoken"]'))
    code, out, err = cli("--json", "lock", str(recipe), "--out", str(tmp_path / "locks"))
    if agrees:
        assert code == 0, err
        (use,) = json.loads(out)["locks"][0]["first_use"]
        assert (use["package"], use["carried"]) == ("tiktoken", True)  # TIKTOKEN_ENCODINGS_BASE points at it
    else:
        assert code == 2
        assert f"tiktoken 0.14.0 publishes {SHA} for o200k_base.tiktoken in tiktoken_ext/openai_public.py" in err
        assert not (tmp_path / "locks").exists()
