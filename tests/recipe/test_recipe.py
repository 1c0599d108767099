"""Recipes: parsed once into frozen records; every mistake reported at once, naming file, key, expected, found."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from lockbuild.builder.direct import source_requirements
from lockbuild.builder.plan import resolved_recipe
from lockbuild.errors import RecipeError
from lockbuild.recipe import (
    MAX_RECIPE_BYTES,
    MAX_STRING,
    Assets,
    GpuRequirement,
    ReleaseWheel,
    SecondIndex,
    SourceArchive,
    UrlWheel,
    load_recipe,
    parse_recipe,
)

ENGINE = """\
[engine]
name = "eng"
pypi = "eng"
binary = "eng"
verify = ["eng", "--version"]
"""

BUILD = """
[[builds]]
version = "1.0"
variant = "cpu"
python = "3.12"
platform = "x86_64-manylinux_2_28"
requirements = ["eng==1.0"]
"""

SHA = "ab" * 32

FULL = f"""\
# the demo engine
[engine]
name = "eng"
pypi = "Eng_Project"
repo = "owner/eng"
binary = "eng-serve"
verify = ["eng", "--version"]
gpu-probe = "probes/check.py"

[[builds]]
version = "1.0"
variant = "cu128"  # the CUDA build
python = "3.12"
platform = "aarch64-manylinux_2_28"
requirements = ["eng==1.0", "Torch==2.8.0", "extra[a,b]>=1; python_version >= '3.10'"]
as-of = "2025-10-05T01:40:00Z"
free-gb = 30
gpu = {{ min-capability = "7.5", min-driver = "580" }}
index = {{ url = "https://download.example/whl/cu128/", packages = ["torch"] }}
source = {{ url = "https://example.org/eng-1.0.tar.gz", sha256 = "{SHA}", top = "eng-1.0", dir = "src", \
requirements = "requirements/cuda.txt" }}
wheel = {{ repo = "owner/eng", tag = "v1.0", prefix = "eng-", suffix = "-linux_aarch64.whl", project = "Eng_Wheel" }}
assets = {{ tag = "v1.0", dir = "share/eng", files = ["eng-cuda-linux.tar.gz"] }}

[[builds]]
version = "1.0"
variant = "cpu"
python = "3.11"
platform = "x86_64-unknown-linux-gnu"
requirements = ["eng==1.0"]
"""


def problems_of(text: str, path: str = "recipes/eng.toml") -> tuple[str, ...]:
    with pytest.raises(RecipeError) as info:
        parse_recipe(text, path)
    err = info.value
    assert err.message.startswith(f"{path}: "), err.message
    assert err.problems, "a recipe with problems lists them"
    for p in err.problems:
        assert p in err.message
    return err.problems


def one_problem(text: str) -> str:
    problems = problems_of(text)
    assert len(problems) == 1, problems
    return problems[0]


def build_with(*lines: str, drop: tuple[str, ...] = ()) -> str:
    """ENGINE plus one build, with some keys replaced or removed."""
    keys = {line.split("=", 1)[0].strip() for line in lines}
    kept = [
        line
        for line in BUILD.splitlines()
        if line.split("=", 1)[0].strip() not in keys and line.split("=", 1)[0].strip() not in drop
    ]
    return ENGINE + "\n".join(kept) + "\n" + "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------- a valid recipe
def test_a_full_recipe_parses_into_typed_records() -> None:
    r = parse_recipe(FULL, "bundles/eng.toml")
    assert r.path == "bundles/eng.toml"
    assert r.engine.pypi == "Eng_Project"
    assert r.engine.verify == ("eng", "--version")
    assert r.engine.gpu_probe == "probes/check.py"
    assert [b.id for b in r.builds] == ["1.0-cu128", "1.0-cpu"]
    b = r.builds[0]
    assert (b.python, b.platform, b.target.parsed.arch) == ("3.12", "aarch64-manylinux_2_28", "aarch64")
    assert b.as_of == dt.datetime(2025, 10, 5, 1, 40, tzinfo=dt.UTC)
    assert b.free_gb == 30
    assert b.gpu == GpuRequirement((7, 5), "580")
    assert b.index == SecondIndex("https://download.example/whl/cu128", ("torch",))
    assert b.source == SourceArchive(
        "https://example.org/eng-1.0.tar.gz", SHA, "eng-1.0", "src", "requirements/cuda.txt"
    )
    assert b.wheel == ReleaseWheel("owner/eng", "v1.0", "eng-", "-linux_aarch64.whl", "eng-wheel")
    assert b.assets == Assets("v1.0", "share/eng", ("eng-cuda-linux.tar.gz",))
    cpu = r.builds[1]
    assert cpu.as_of is None and cpu.index is None and cpu.gpu is None
    assert r.engine.repo == "owner/eng"


def test_defaults_when_optional_keys_are_left_out() -> None:
    r = parse_recipe(ENGINE + BUILD)
    assert r.engine.repo is None and r.engine.gpu_probe == "none"
    b = r.builds[0]
    assert (b.as_of, b.free_gb, b.gpu, b.index, b.source, b.wheel, b.assets) == (None,) * 7


def test_the_recipe_digest_is_of_its_text() -> None:
    assert parse_recipe(ENGINE + BUILD).sha256 == parse_recipe(ENGINE + BUILD).sha256
    assert parse_recipe(ENGINE + BUILD).sha256 != parse_recipe("# note\n" + ENGINE + BUILD).sha256


# ------------------------------------------------------------------------------ reporting problems
def test_three_mistakes_are_reported_together() -> None:
    text = ENGINE.replace("binary", "binray") + BUILD.replace('"3.12"', "3.12").replace(
        "manylinux_2_28", "manylinux_2_99"
    )
    with pytest.raises(RecipeError) as info:
        parse_recipe(text, "bundles/eng.toml")
    err = info.value
    assert err.message.startswith("bundles/eng.toml: 3 problems in the recipe:")
    assert err.problems == (  # the misspelt key is one problem: no second "binary: missing" for it
        "engine.binray: unknown key; did you mean 'binary'?",
        'builds[0].python: expected a Python version "3.X", found a number (3.12)',
        err.problems[2],
    )
    assert err.problems[2].startswith("builds[0].platform: expected a platform of the form")
    assert "found 'x86_64-manylinux_2_99'" in err.problems[2]
    assert err.tip


def test_a_recipe_file_with_mistakes_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "eng.toml"
    path.write_text(build_with('variant = "CPU!"', 'version = ""', "requirements = []"))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert info.value.message.startswith(f"{path}: 3 problems")
    assert [p.split(":")[0] for p in info.value.problems] == [
        "builds[0].version",
        "builds[0].variant",
        "builds[0].requirements",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ENGINE.replace("pypi", "pipy") + BUILD, "engine.pipy: unknown key; did you mean 'pypi'?"),
        (build_with('platfrom = "x86_64-manylinux_2_28"', drop=("platform",)), "did you mean 'platform'?"),
        (build_with('as_of = "2025-01-01T00:00:00Z"'), "builds[0].as_of: unknown key; did you mean 'as-of'?"),
        (build_with('gpu = { min-capabilty = "8.0" }'), "builds[0].gpu.min-capabilty: unknown key; did you mean"),
        (build_with('index = { url = "https://x.example/simple", packges = ["eng"] }'), "did you mean 'packages'?"),
        ("[engines]\n" + ENGINE.split("\n", 1)[1] + BUILD, "engines: unknown key; did you mean 'engine'?"),
    ],
)
def test_unknown_keys_get_a_did_you_mean(text: str, expected: str) -> None:
    assert any(expected in p for p in problems_of(text)), problems_of(text)


def test_an_unknown_key_like_nothing_lists_the_known_keys() -> None:
    problem = one_problem(build_with("zzzzzz = 1"))
    assert problem.startswith("builds[0].zzzzzz: unknown key; known keys: version, variant, python, platform")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("version = 1.0", "builds[0].version: expected a version such as 0.11.0, found a number (1.0)"),
        ("variant = true", "builds[0].variant: expected a variant name such as cu128, found a boolean (True)"),
        ('python = "3"', "builds[0].python: expected a Python version \"3.X\", found '3'"),
        ('requirements = "eng==1.0"', "builds[0].requirements: expected a list of requirement strings, found a string"),
        (
            "requirements = [1]",
            "builds[0].requirements: expected a list of requirement strings, but item 0 is an integer",
        ),
        ('free-gb = "30"', "builds[0].free-gb: expected a whole number of gigabytes, found a string ('30')"),
        ("free-gb = true", "builds[0].free-gb: expected a whole number of gigabytes, found a boolean"),
        ("free-gb = 0", "builds[0].free-gb: expected between 1 and 99999, found 0"),
        ('gpu = "big"', "builds[0].gpu: expected a table, found a string ('big')"),
        ('gpu = { min-capability = "8" }', 'builds[0].gpu.min-capability: expected a compute capability such as "8.0"'),
        ('gpu = { min-driver = "latest" }', 'builds[0].gpu.min-driver: expected a driver version such as "580"'),
        (
            "as-of = 2025-10-05",
            "builds[0].as-of: expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date",
        ),
        (
            'as-of = "2025-10-05"',
            "builds[0].as-of: expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date",
        ),
        ('as-of = "yesterday"', "builds[0].as-of: expected an RFC 3339 time such as 2025-10-05T01:40:00Z"),
        ("as-of = 2025-10-05T01:40:00", "builds[0].as-of: expected a time with a zone (add Z for UTC)"),
        ('as-of = "2025-10-05T01:40:00"', "builds[0].as-of: expected a time with a zone (add Z for UTC)"),
        ('index = { url = "ftp://x.example/simple", packages = ["eng"] }', "builds[0].index.url: expected an http(s)"),
        ('index = { url = "https://x.example/simple", packages = [] }', "expected at least one package"),
        ('index = { url = "https://x.example/simple", packages = ["a/b"] }', "expected package names, found 'a/b'"),
        (
            'source = { url = "https://x.example/a.tgz", sha256 = "AB", top = "a", dir = "b" }',
            "source.sha256: expected 64",
        ),
        (
            'wheel = { repo = "x", tag = "v", prefix = "e", suffix = ".whl", project = "e" }',
            "wheel.repo: expected OWNER/NAME",
        ),
        ('wheel = { repo = "o/x", tag = "v", prefix = "e", suffix = ".zip", project = "e" }', "wheel.suffix: expected"),
        (
            'assets = { tag = "v", dir = "a", files = "x.tgz" }',
            "builds[0].assets.files: expected a list of release file",
        ),
    ],
)
def test_wrong_values_say_what_was_expected_and_what_was_found(line: str, expected: str) -> None:
    assert expected in one_problem(build_with(line))


def test_wrong_engine_values_are_reported_together() -> None:
    text = (
        '[engine]\nname = "Eng Engine"\npypi = "eng/../x"\nrepo = "not-a-repo"\nbinary = "../bin/sh"\n'
        'verify = []\ngpu-probe = "cuda"\n' + BUILD
    )
    problems = problems_of(text)
    assert [p.split(":")[0] for p in problems] == [
        "engine.name",
        "engine.pypi",
        "engine.repo",
        "engine.binary",
        "engine.verify",
        "engine.gpu-probe",
    ]
    assert "found an empty list" in problems[4]
    assert 'expected "torch", "none", or a relative path to a .py file' in problems[5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BUILD, "engine: missing; expected an [engine] table"),
        (ENGINE, "builds: missing; expected one or more [[builds]] tables"),
        ("builds = []\n" + ENGINE, "builds: expected one or more [[builds]] tables, found none"),
        ("builds = [1]\n" + ENGINE, "builds[0]: expected a table, found an integer (1)"),
        (ENGINE + '[builds]\nversion = "1"\n', "builds: expected one or more [[builds]] tables, found a table"),
        ('engine = "eng"\n' + BUILD, "engine: expected an [engine] table, found a string ('eng')"),
    ],
)
def test_the_shape_of_the_recipe_is_checked(text: str, expected: str) -> None:
    assert expected in problems_of(text)


def test_every_missing_build_key_is_named() -> None:
    problems = problems_of(ENGINE + "[[builds]]\n")
    assert problems == tuple(
        f"builds[0].{key}: missing; expected {what}"
        for key, what in [
            ("version", "a version such as 0.11.0"),
            ("variant", "a variant name such as cu128"),
            ("python", 'a Python version "3.X"'),
            ("platform", "a platform such as x86_64-manylinux_2_28"),
            ("requirements", "a list of requirement strings"),
        ]
    )


def test_duplicate_builds_are_refused() -> None:
    problem = one_problem(ENGINE + BUILD + BUILD)
    assert problem == "builds[1]: duplicate build 1.0-cpu (also builds[0])"


def test_mistakes_in_several_builds_name_each_build() -> None:
    text = ENGINE + BUILD + BUILD.replace('"cpu"', '"gpu"').replace('"3.12"', '"2.7"')
    assert [p.split(":")[0] for p in problems_of(text)] == ["builds[1].python"]


# ----------------------------------------------------------------------------- hostile recipes
def test_huge_strings_are_refused_with_their_length() -> None:
    problem = one_problem(build_with(f'variant = "{"c" * (MAX_STRING + 1)}"'))
    assert problem == f"builds[0].variant: expected at most {MAX_STRING} characters, found {MAX_STRING + 1}"
    problem = one_problem(build_with(f'requirements = ["{"e" * (MAX_STRING + 1)}"]'))
    assert problem.startswith("builds[0].requirements: expected a list of requirement strings, but item 0 is")
    assert len(problem) < 300


def test_a_huge_unknown_key_is_shown_cut_short() -> None:
    problem = one_problem(build_with(f"{'k' * 50_000} = 1"))
    assert "unknown key" in problem and len(problem) < 400


def test_long_lists_are_refused() -> None:
    reqs = ", ".join(f'"p{i}"' for i in range(1001))
    assert one_problem(build_with(f"requirements = [{reqs}]")) == (
        "builds[0].requirements: expected at most 1000 items, found 1001"
    )


def test_a_recipe_over_the_size_limit_is_refused_before_parsing() -> None:
    text = ENGINE + BUILD + "#" * MAX_RECIPE_BYTES
    with pytest.raises(RecipeError, match=f"expected a recipe of at most {MAX_RECIPE_BYTES} bytes"):
        parse_recipe(text)


@pytest.mark.parametrize(
    "bomb",
    [
        "a = " + "[" * 100_000,
        "a = " + "[" * 20_000 + "]" * 20_000,
        "a = " + "{ b = " * 50_000,
        "a = " + "[" * 600 + "]" * 600,
    ],
)
def test_a_toml_bomb_is_a_recipe_error_not_a_crash(bomb: str) -> None:
    with pytest.raises(RecipeError, match="not valid TOML"):
        parse_recipe(bomb, "bomb.toml")


def test_invalid_toml_names_the_line() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(ENGINE + 'x = "unterminated\n', "bad.toml")
    assert info.value.message.startswith("bad.toml: not valid TOML:")
    assert "line 6" in info.value.message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "../x" }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "/opt/x" }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "a/../../x" }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "a//b" }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "." }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "a\\\\b" }', "dir"),
        ('source = { url = "https://x.example/a.tgz", sha256 = "' + SHA + '", top = "..", dir = "src" }', "top"),
        (
            'source = { url = "https://x.example/a.tgz", sha256 = "'
            + SHA
            + '", top = "a", dir = "s", requirements = "/etc/passwd" }',
            "requirements",
        ),
        ('source = { url = "file:///etc/a.tgz", sha256 = "' + SHA + '", top = "a", dir = "s" }', "url"),
        ('assets = { tag = "v", dir = "../../etc", files = ["a.tgz"] }', "dir"),
        ('assets = { tag = "v", dir = "share", files = ["../a.tgz"] }', "files"),
        ('assets = { tag = "v", dir = "share", files = ["sub/a.tgz"] }', "files"),
    ],
)
def test_paths_that_escape_are_refused(line: str, key: str) -> None:
    problem = one_problem(build_with(line))
    table = line.split(" ", 1)[0]
    assert problem.startswith(f"builds[0].{table}.{key}: expected")


@pytest.mark.parametrize("probe", ["../probe.py", "/usr/lib/probe.py", "probe.sh"])
def test_a_gpu_probe_outside_the_recipe_is_refused(probe: str) -> None:
    text = ENGINE + f'gpu-probe = "{probe}"\n' + BUILD
    assert one_problem(text).startswith("engine.gpu-probe: expected")


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("eng @ https://evil.example/eng.whl", "URLs are not allowed in requirements"),
        ("https://evil.example/eng-1.0-py3-none-any.whl", "URLs are not allowed in requirements"),
        ("git+https://git.invalid/o/eng.git", "URLs are not allowed in requirements"),
        ("eng @ git+https://git.invalid/o/eng.git@v1", "URLs are not allowed in requirements"),
        ("eng.whl", "archive suffix"),
        ("eng-1.0.tar.gz", "archive suffix"),
        ("eng==1.0\\n--index-url https://evil.example", "found a control character or line break"),
        ("eng==", "not a valid requirement"),
    ],
)
def test_requirements_that_reach_outside_the_index_are_refused(requirement: str, expected: str) -> None:
    problem = one_problem(build_with(f'requirements = ["eng==1.0", "{requirement}"]'))
    assert problem.startswith("builds[0].requirements[1]: ")
    assert expected in problem
    if "URLs" in expected:
        assert "wheel = { url" in problem  # points to the key that takes a wheel from a URL


# ----------------------------------------------------- exact values, Git ref tags
@pytest.mark.parametrize("key", ["name", "pypi", "binary", "repo"])
def test_an_engine_value_with_a_trailing_newline_is_refused(key: str) -> None:
    engine = ENGINE + 'repo = "o/eng"\n'
    value = "o/eng" if key == "repo" else "eng"
    text = engine.replace(f'{key} = "{value}"', f'{key} = "{value}\\n"', 1) + BUILD
    problems = problems_of(text)
    assert any(p.startswith(f"engine.{key}: expected") for p in problems), problems


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("version", '"1.0\\n"'),
        ("variant", '"cpu\\n"'),
        ("python", '"3.12\\n"'),
        ("platform", '"x86_64-manylinux_2_28\\n"'),
        ("gpu", '{ min-driver = "580\\n" }'),
        ("gpu", '{ min-capability = "8.0\\n" }'),
        ("source", '{ url = "https://x.example/s.tar.gz", sha256 = "' + "a" * 64 + '\\n", top = "s", dir = "s" }'),
        ("wheel", '{ repo = "o/r", tag = "v1\\n", prefix = "eng-", suffix = ".whl", project = "eng" }'),
        ("wheel", '{ repo = "o/r\\n", tag = "v1", prefix = "eng-", suffix = ".whl", project = "eng" }'),
        ("assets", '{ tag = "v1", dir = "bin", files = ["tool\\n"] }'),
        ("assets", '{ tag = "v1\\n", dir = "bin", files = ["tool"] }'),
    ],
)
def test_a_build_value_with_a_trailing_newline_is_refused(key: str, value: str) -> None:
    problems = problems_of(build_with(f"{key} = {value}"))
    assert any(p.startswith(f"builds[0].{key}") and "expected" in p for p in problems), problems


@pytest.mark.parametrize(
    "tag",
    [
        "../../../../other/repo/releases/tags/v1",
        "v1/../../x",
        "/v1",
        "v1/",
        "v1//x",
        ".v1",
        "v1.lock",
        "v1.",
        "v1 x",
        "v1?x=1",
        "v1#x",
        "v1%2F..",
        "v1~1",
        "v1^",
        "v1:x",
        "@",
        "v1@{0}",
        "",
    ],
)
def test_a_release_tag_that_is_not_a_git_ref_name_is_refused(tag: str) -> None:
    for key, table in (
        ("wheel", f'{{ repo = "o/r", tag = "{tag}", prefix = "eng-", suffix = ".whl", project = "eng" }}'),
        ("assets", f'{{ tag = "{tag}", dir = "bin", files = ["tool"] }}'),
    ):
        text = build_with(f"{key} = {table}").replace('name = "eng"', 'name = "eng"\nrepo = "o/r"', 1)
        problems = problems_of(text)
        assert any(
            p.startswith(f"builds[0].{key}.tag: expected a release tag that is a Git ref name") for p in problems
        )


@pytest.mark.parametrize("tag", ["v0.11.0", "b6123", "20251014", "release/1.2", "v1.2.3-rc.1+build_7"])
def test_real_release_tags_are_accepted(tag: str) -> None:
    text = build_with(f'wheel = {{ repo = "o/r", tag = "{tag}", prefix = "eng-", suffix = ".whl", project = "eng" }}')
    assert parse_recipe(text).builds[0].wheel == ReleaseWheel("o/r", tag, "eng-", ".whl", "eng")


# ------------------------------------------------- pin-sha256, wheel from a URL, exclude-newer-package
def test_pin_sha256_names_one_file_per_package() -> None:
    text = build_with('pin-sha256 = { Torch = "' + "a" * 64 + '", eng = "' + "b" * 64 + '" }')
    b = parse_recipe(text).builds[0]
    assert b.pin_sha256 == (("eng", "b" * 64), ("torch", "a" * 64))
    assert b.pinned_sha256("torch") == "a" * 64 and b.pinned_sha256("other") is None


@pytest.mark.parametrize("value", ['"' + "A" * 64 + '"', '"abc"', "1", '"' + "a" * 64 + '\\n"'])
def test_a_pin_sha256_that_is_not_a_digest_is_refused(value: str) -> None:
    assert one_problem(build_with(f"pin-sha256 = {{ eng = {value} }}")).startswith(
        "builds[0].pin-sha256.eng: expected the file's sha256"
    )


def test_a_wheel_from_a_url_needs_its_sha256() -> None:
    url = "https://wheels.example/nightly/eng-1.0%2Bcu129-cp38-abi3-manylinux1_x86_64.whl"
    b = parse_recipe(build_with(f'wheel = {{ url = "{url}", sha256 = "{"c" * 64}" }}')).builds[0]
    assert b.wheel == UrlWheel(url, "c" * 64)
    assert one_problem(build_with(f'wheel = {{ url = "{url}" }}')) == (
        "builds[0].wheel.sha256: missing; expected the wheel's sha256, 64 lower-case hex digits"
    )
    problem = one_problem(build_with(f'wheel = {{ url = "https://x.example/eng.tar.gz", sha256 = "{"c" * 64}" }}'))
    assert problem.startswith("builds[0].wheel.url: expected a URL ending in a wheel file name")


def test_exclude_newer_package_takes_a_time_or_false() -> None:
    text = build_with('exclude-newer-package = { SetupTools = "2024-06-01T00:00:00Z", wheel = false }')
    b = parse_recipe(text).builds[0]
    assert b.exclude_newer_package == (("setuptools", "2024-06-01T00:00:00Z"), ("wheel", None))
    for bad in ("true", '"June"', '"2024-06-01"'):
        problem = one_problem(build_with(f"exclude-newer-package = {{ setuptools = {bad} }}"))
        assert problem.startswith("builds[0].exclude-newer-package.setuptools: expected")


def test_a_platform_uv_cannot_target_is_refused_at_parse_time() -> None:
    problem = one_problem(build_with('platform = "x86_64-manylinux_2_29"'))
    assert problem.startswith("builds[0].platform: expected a platform of the form")
    assert "found 'x86_64-manylinux_2_29'" in problem


def test_a_platform_mistake_is_reported_even_when_python_is_wrong_too() -> None:
    problems = problems_of(build_with('python = "three"', 'platform = "windows"'))
    assert [p.split(":")[0] for p in problems] == ["builds[0].python", "builds[0].platform"]


# --------------------------------------------------------------------------------- second index
SECOND = 'index = { url = "https://download.example/whl", packages = ["torch"] }'


def test_an_unpinned_second_index_package_is_refused_saying_why() -> None:
    problem = one_problem(build_with('requirements = ["eng==1.0", "torch>=2.8"]', SECOND))
    assert problem.startswith("builds[0].index.packages: 'torch' comes from the second index")
    assert "publishes no upload times" in problem
    assert "must be pinned with == in requirements, found 'torch>=2.8'" in problem


@pytest.mark.parametrize("req", ["torch", "torch==2.*", "torch===2.8.0", "torch>=2.8,<=2.8"])
def test_only_an_exact_pin_holds_a_second_index_package(req: str) -> None:
    problem = one_problem(build_with(f'requirements = ["eng==1.0", "{req}"]', SECOND))
    assert "must be pinned with ==" in problem


def test_a_second_index_package_missing_from_requirements_is_refused() -> None:
    problem = one_problem(build_with(SECOND))
    assert "'torch' comes from the second index but is not in requirements" in problem
    assert "torch==X.Y.Z" in problem


def test_a_pinned_second_index_package_is_accepted_by_its_canonical_name() -> None:
    r = parse_recipe(build_with('requirements = ["eng==1.0", "Torch==2.8.0"]', SECOND.replace("torch", "TORCH")))
    assert r.builds[0].index == SecondIndex("https://download.example/whl", ("torch",))


def test_one_exact_pin_among_several_entries_holds_the_package() -> None:
    r = parse_recipe(build_with('requirements = ["eng==1.0", "torch>=2", "torch==2.8.0"]', SECOND))
    assert r.builds[0].index is not None


# ------------------------------------------------------------------------------- choosing builds
MULTI = ENGINE + BUILD + BUILD.replace('"cpu"', '"cu128"') + BUILD.replace('"1.0"', '"2.0"').replace('"cpu"', '"cu128"')


def test_build_selection_by_variant_or_version_variant() -> None:
    r = parse_recipe(MULTI, "m.toml")
    assert [b.id for b in r.select(None)] == ["1.0-cpu", "1.0-cu128", "2.0-cu128"]
    assert [b.id for b in r.select("cpu")] == ["1.0-cpu"]
    assert [b.id for b in r.select("2.0-cu128")] == ["2.0-cu128"]
    assert [b.id for b in r.select("1.0-cu128")] == ["1.0-cu128"]


def test_an_ambiguous_variant_asks_for_version_variant() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MULTI, "m.toml").select("cu128")
    assert info.value.message == "m.toml: --build cu128 matches several builds (1.0-cu128, 2.0-cu128)."
    assert info.value.tip is not None and "VERSION-VARIANT" in info.value.tip


def test_an_unknown_build_lists_the_builds_there_are() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(MULTI, "m.toml").select("rocm")
    assert info.value.message == "m.toml: no build 'rocm'; this recipe has 1.0-cpu, 1.0-cu128, 2.0-cu128."


# ------------------------------------------------------------------------------ the resolved recipe
def test_resolved_text_keeps_only_the_build_and_fills_in_as_of() -> None:
    r = parse_recipe(FULL, "bundles/eng.toml")
    as_of = dt.datetime(2025, 1, 6, 12, 30, tzinfo=dt.UTC)
    text = resolved_recipe(r, r.builds[1], as_of)
    assert "# the demo engine" in text
    data = tomllib.loads(text)
    assert len(data["builds"]) == 1
    assert data["builds"][0]["variant"] == "cpu"
    assert data["builds"][0]["as-of"] == as_of
    again = parse_recipe(text, "resolved.toml")
    assert [b.id for b in again.builds] == ["1.0-cpu"]
    assert again.builds[0].as_of == as_of
    assert again.engine == r.engine


def test_resolved_text_replaces_an_as_of_already_set_and_keeps_comments() -> None:
    r = parse_recipe(FULL)
    text = resolved_recipe(r, r.builds[0], dt.datetime(2025, 10, 5, 1, 40, tzinfo=dt.UTC))
    assert text.count("as-of") == 1
    assert "# the CUDA build" in text
    again = parse_recipe(text)
    assert again.builds[0].as_of == dt.datetime(2025, 10, 5, 1, 40, tzinfo=dt.UTC)
    assert again.builds[0].index == r.builds[0].index


def test_resolved_text_converts_as_of_to_utc() -> None:
    r = parse_recipe(ENGINE + BUILD)
    local = dt.datetime(2025, 1, 6, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    data = tomllib.loads(resolved_recipe(r, r.builds[0], local))
    assert data["builds"][0]["as-of"] == dt.datetime(2025, 1, 6, 12, 0, tzinfo=dt.UTC)
    assert data["builds"][0]["as-of"].utcoffset() == dt.timedelta(0)


def test_resolved_text_of_an_inline_array_of_builds() -> None:
    text = (
        'builds = [\n  { version = "1.0", variant = "a", python = "3.12", platform = "x86_64-manylinux_2_28",'
        ' requirements = ["eng==1.0"] },\n  { version = "1.0", variant = "b", python = "3.12",'
        ' platform = "x86_64-manylinux_2_28", requirements = ["eng==1.0"] },\n]\n' + ENGINE
    )
    r = parse_recipe(text)
    resolved = parse_recipe(resolved_recipe(r, r.builds[1], dt.datetime(2025, 1, 1, tzinfo=dt.UTC)))
    assert [b.id for b in resolved.builds] == ["1.0-b"]
    assert resolved.builds[0].as_of == dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


# -------------------------------------------------------------------------------- reading files
def test_a_missing_recipe_file_is_a_recipe_error(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"cannot read recipe .*nothing\.toml"):
        load_recipe(tmp_path / "nothing.toml")


def test_a_recipe_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(ENGINE.encode() + b"# caf\xe9\n" + BUILD.encode())
    with pytest.raises(RecipeError, match="expected UTF-8 text"):
        load_recipe(path)


def test_load_recipe_reads_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "eng.toml"
    path.write_text(ENGINE + BUILD)
    assert load_recipe(path).path == str(path)


# ------------------------------------------------------------------------ source requirements rules
def test_source_requirements_keep_plain_lines_and_skip_comments_and_blanks() -> None:
    text = (
        "# core\n\nnumpy>=1.26  # arrays\n   \nfastapi[standard] >= 0.115\n"
        "triton==3.4.0; platform_machine == 'x86_64'\n\t# indented comment\nregex\t# tabbed comment\n"
    )
    assert source_requirements(text, skip=(), where="src") == (
        "numpy>=1.26",
        "fastapi[standard] >= 0.115",
        "triton==3.4.0; platform_machine == 'x86_64'",
        "regex",
    )


def test_source_requirements_skip_the_second_index_packages_by_canonical_name() -> None:
    text = "Torch==2.8.0\ntorch_vision\nnumpy\ntorchaudio ; sys_platform == 'linux'\n"
    assert source_requirements(text, skip=("torch", "torch-vision", "TorchAudio"), where="src") == ("numpy",)


def test_source_requirements_refuse_options_urls_and_paths_all_at_once() -> None:
    text = "\n".join(
        [
            "numpy",
            "-r other.txt",
            "-e .",
            "--index-url https://evil.example/simple",
            "--extra-index-url=https://evil.example/simple",
            "-c constraints.txt",
            "https://evil.example/pkg-1.0.tar.gz",
            "pkg @ https://evil.example/pkg.whl",
            "pkg @ file:///tmp/pkg.whl",
            "pkg @ file:pkg.whl",
            "./local/pkg",
            "/abs/pkg",
            "../pkg",
            "~/pkg",
            "pkg-1.0-py3-none-any.whl",
            "git+https://git.invalid/o/r",
            "torch==2.8.0 --hash=sha256:" + SHA,
            "regex",
        ]
    )
    with pytest.raises(RecipeError) as info:
        source_requirements(text, skip=("torch",), where="https://example.org/eng.tar.gz (1.0-cpu)")
    err = info.value
    assert err.message.startswith("https://example.org/eng.tar.gz (1.0-cpu): the engine's requirements file has lines")
    lines = [p.split(":", 1)[0] for p in err.problems]
    assert lines == [f"line {n}" for n in range(2, 18)]
    assert "options such as '-r' are not allowed" in err.problems[0]
    assert "options such as '--index-url' are not allowed" in err.problems[2]
    assert all("URLs are not allowed in requirements" in p for p in err.problems[5:9])
    assert all("paths are not allowed in requirements" in p for p in err.problems[9:13])
    assert "archive suffix" in err.problems[13]
    assert "not a valid requirement" in err.problems[15]


def test_source_requirements_with_many_bad_lines_keep_the_message_short() -> None:
    text = "\n".join(f"-r file{i}.txt" for i in range(5000))
    with pytest.raises(RecipeError) as info:
        source_requirements(text, skip=(), where="src")
    assert len(info.value.problems) == 5000
    assert "... and 4950 more" in info.value.message
    assert len(info.value.message) < 10_000


def test_an_empty_source_requirements_file_gives_nothing() -> None:
    assert source_requirements("# nothing\n\n", skip=(), where="src") == ()


# ------------------------------------------------------------------------------------ fuzzing
_TOML_PIECES = st.sampled_from(
    [
        ENGINE,
        BUILD,
        "[[builds]]\n",
        "[engine]\n",
        'version = "1.0"\n',
        "x = [[[1]]]\n",
        'as-of = "2025-01-01"\n',
        "python = 3.12\n",
        'requirements = ["a @ https://x"]\n',
        "gpu = {}\n",
        "index = { packages = [1] }\n",
        'source = { dir = "../x" }\n',
        "builds = 1\n",
        "\n",
        "= oops\n",
        "free-gb = 1e400\n",
    ]
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(_TOML_PIECES, max_size=8), st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_any_text_is_a_recipe_or_a_recipe_error(pieces: list[str], noise: str) -> None:
    for text in ("".join(pieces), "".join(pieces) + noise):
        try:
            parse_recipe(text)
        except RecipeError as exc:
            assert exc.message and len(exc.message) < 20_000


_REQ_LINES = st.sampled_from(
    [
        "numpy",
        "numpy>=1",
        "torch==2.8",
        "-r x.txt",
        "--index-url=https://x",
        "a @ https://x/a.whl",
        "./p",
        "# c",
        "",
        "  ",
        "a.whl",
        "b[x]==1; python_version>'3'",
        "https://x/y.tar.gz",
        "c==1 # note",
        "bad line here",
    ]
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.one_of(_REQ_LINES, st.binary(max_size=30).map(lambda b: b.decode("latin-1"))), max_size=12))
def test_source_requirements_keep_only_plain_requirements(lines: list[str]) -> None:
    try:
        kept = source_requirements("\n".join(lines), skip=("torch",), where="src")
    except RecipeError as exc:
        assert exc.problems
        return
    for line in kept:
        req = Requirement(line)
        assert req.url is None and req.name.lower() != "torch"
        assert not line.startswith("-") and "://" not in line


def test_build_on_node_names_packages() -> None:
    assert parse_recipe(build_with('build-on-node = ["Docopt", "x_y"]')).builds[0].build_on_node == ("docopt", "x-y")
    assert one_problem(build_with('build-on-node = ["../x"]')).startswith("builds[0].build-on-node: expected package")


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u0085", "\u2028"])
def test_a_url_with_an_invisible_or_control_character_is_refused(char: str) -> None:
    line = f'source = {{ url = "https://x.example/eng{char}.tar.gz", sha256 = "{"a" * 64}", top = "e", dir = "s" }}'
    assert one_problem(build_with(line)).startswith("builds[0].source.url: expected an http(s) URL")
