"""The recipe side of the sandbox and the self-test: no credential in a recipe URL, no control character in a recipe's
commands, and ``[engine.env]`` by an allow-list that the recipe and the node's manifest parser share."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from lockbuild import envtable
from lockbuild.bundle.installparse import parse_install
from lockbuild.errors import IntegrityError, RecipeError
from lockbuild.recipe import parse_recipe
from lockbuild.wire.urls import redacted, secret_parameter

ROOT = REPO_ROOT
SHA = "ab" * 32
SECRET = "s3cr3tVALUE42"

ENGINE = """\
[engine]
name = "eng"
pypi = "eng"
binary = "eng"
verify = ["eng", "--version"]
"""


def build(extra: str = "", requirements: str = '["eng==1.0", "torch==2.8.0"]') -> str:
    return f"""
[[builds]]
version = "1.0"
variant = "cpu"
python = "3.12"
platform = "x86_64-manylinux_2_28"
requirements = {requirements}
{extra}
"""


def refused(text: str) -> RecipeError:
    with pytest.raises(RecipeError) as exc:
        parse_recipe(text, "bundles/eng.toml")
    return exc.value


# --- secrets in URLs ----------------------------------------------------------------------------------

SECRET_URLS = [
    (
        f"https://bucket.s3.amazonaws.com/w/x.tar.gz?X-Amz-Credential=AK%2F{SECRET}&X-Amz-Signature={SECRET}",
        "x-amz-credential",
    ),
    (f"https://acct.blob.core.windows.net/c/x.tar.gz?sv=2022-11-02&se=2026-01-01&sp=r&sig={SECRET}", "sig"),
    (f"https://acct.blob.core.windows.net/c/x.tar.gz?sv=2022-11-02&se=2026-01-01&sp=r&sr=b&{SECRET}", "se"),
    (f"https://cdn.example/x.tar.gz?Expires=1767225600&Signature={SECRET}&Key-Pair-Id=K1", "signature"),
    (f"https://storage.googleapis.com/b/x.tar.gz?X-Goog-Algorithm=GOOG4&X-Goog-Signature={SECRET}", "x-goog-algorithm"),
    (f"https://example.org/x.tar.gz?token={SECRET}", "token"),
    (f"https://example.org/x.tar.gz?download=1&access_token={SECRET}", "access_token"),
    (f"https://example.org/x.tar.gz?key={SECRET}", "key"),
    (f"https://example.org/x.tar.gz?hf_token={SECRET}", "hf_token"),
    (f"https://example.org/x.tar.gz#access_token={SECRET}", "access_token"),
    (f"https://user:{SECRET}@example.org/x.tar.gz", "userinfo"),
]


@pytest.mark.parametrize(("url", "param"), SECRET_URLS)
def test_secret_parameter_names_the_part_never_the_value(url: str, param: str) -> None:
    assert secret_parameter(url) == param
    assert SECRET not in redacted(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://download.pytorch.org/whl/cu128",
        "https://github.com/o/r/archive/refs/tags/v1.2.tar.gz",
        "https://example.org/x.tar.gz?download=1&raw=true",
        "https://example.org/eng-1.0-py3-none-any.whl#sha256=" + SHA,
        "https://example.org/keyring-1.0.tar.gz",  # "key" in the path is a path
    ],
)
def test_ordinary_urls_have_no_secret(url: str) -> None:
    assert secret_parameter(url) is None


@pytest.mark.parametrize(("url", "param"), SECRET_URLS)
@pytest.mark.parametrize(
    ("key", "table"),
    [
        ("builds[0].source.url", 'source = {{ url = "{url}", sha256 = "' + SHA + '", top = "e", dir = "src" }}'),
        ("builds[0].index.url", 'index = {{ url = "{url}", packages = ["torch"] }}'),
        ("builds[0].indexes[0].url", 'indexes = [{{ name = "pt", url = "{url}", packages = ["torch"] }}]'),
        ("builds[0].wheel.url", 'wheel = {{ url = "{url}", sha256 = "' + SHA + '" }}'),
    ],
)
def test_a_recipe_url_that_carries_a_credential_is_refused(url: str, param: str, key: str, table: str) -> None:
    if key.endswith("wheel.url"):  # a wheel URL must end in a wheel file name
        url = url.replace("x.tar.gz", "eng-1.0-py3-none-any.whl")
    err = refused(ENGINE + build(table.format(url=url)))
    assert err.exit_code == 2
    line = next(x for x in err.problems if x.startswith(key + ":"))
    assert "without credentials" in line
    assert (repr(param) in line) if param != "userinfo" else ("user:password@" in line)
    assert SECRET not in err.message and SECRET not in str(err.tip)


def test_a_url_requirement_is_refused_without_echoing_its_token() -> None:
    err = refused(ENGINE + build(requirements=f'["eng @ https://example.org/eng.whl?token={SECRET}"]'))
    assert "URLs are not allowed in requirements" in err.message
    assert SECRET not in err.message


# --- control characters in commands ---------------------------------------------------------------------


@pytest.mark.parametrize("word", ["eng\\n--version", "--ver\\u0000sion", "\\u001b[2J", "a\\u202eb", "\\r"])
@pytest.mark.parametrize("key", ["verify", "smoke", "gpu-smoke"])
def test_a_control_character_in_a_recipe_command_is_refused_at_parse_time(word: str, key: str) -> None:
    text = ENGINE.replace('verify = ["eng", "--version"]', f'{key} = ["eng", "{word}"]')
    if key != "verify":
        text += 'verify = ["eng", "--version"]\n'
    err = refused(text + build())
    assert err.exit_code == 2, "a usage error (exit 2), not a damaged download (exit 4) later"
    assert any(x.startswith(f"engine.{key}: word 1:") and "control character" in x for x in err.problems), err.message


def test_a_control_character_in_the_probe_path_or_binary_is_refused() -> None:
    err = refused(ENGINE + 'gpu-probe = "probes/a\\u001b.py"\n' + build())
    assert any(x.startswith("engine.gpu-probe:") for x in err.problems)
    err = refused(ENGINE.replace('binary = "eng"', 'binary = "eng\\n"') + build())
    assert any(x.startswith("engine.binary:") for x in err.problems)


def test_empty_commands_and_words_are_refused() -> None:
    assert any(
        x.startswith("engine.verify:") for x in refused(ENGINE.replace('"eng", "--version"', "") + build()).problems
    )
    assert any(x.startswith("engine.verify:") for x in refused(ENGINE.replace('"--version"', '""') + build()).problems)


# --- [engine.env] by allow-list -------------------------------------------------------------------------

REFUSED_NAMES = [
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PROMPT_COMMAND",
    "GCONV_PATH",
    "PERL5OPT",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "GIT_SSH_COMMAND",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "PATH",
    "HOME",
    "BASH_ENV",
    "ENV",
    "IFS",
    "PS4",
    "LOCKBUILD_ROOT",
    "UV_INDEX_URL",
    "PIP_INDEX_URL",
    "CURL_CA_BUNDLE",
    "SHELLOPTS",
    "NETENGINE_MODE",
    "MALLOC_CONF",
    "GLIBC_TUNABLES",
]
ACCEPTED = [
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("DO_NOT_TRACK", "1"),
    ("SGLANG_ENABLE_TORCH_COMPILE", "0"),
    ("CUDA_MODULE_LOADING", "LAZY"),
    ("NCCL_P2P_DISABLE", "1"),
    ("TORCH_HOME", "/var/cache/torch"),
    ("OMP_NUM_THREADS", "4"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("TRITON_CACHE_DIR", "/var/cache/triton"),
    ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"),
    ("LLAMA_ARG_N_GPU_LAYERS", "99"),
]


def env_recipe(lines: str, allow: str = "") -> str:
    head = ENGINE + (f"allow-network = {allow}\n" if allow else "")
    return head + "\n[engine.env]\n" + lines + "\n" + build()


def manifest_verdict(env: dict[str, object], hosts: list[str]) -> str | None:
    table = {
        "binary": "e",
        "verify": ["e"],
        "gpu-probe": "none",
        "uv": "tools/uv.whl",
        "env": env,
        "allow-network": hosts,
    }
    try:
        parse_install(table, {"tools/uv.whl": "tool"})
    except IntegrityError as exc:
        return exc.message
    return None


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_a_name_outside_the_allow_list_is_refused_by_the_recipe_and_by_the_node(name: str) -> None:
    why = ("not a setting an engine library reads", "steers the loader, the interpreter or the shell")
    err = refused(env_recipe(f'{name} = "x"'))
    assert any(x.startswith(f"engine.env.{name}:") and any(w in x for w in why) for x in err.problems), err.message
    got = manifest_verdict({name: "x"}, [])
    assert got is not None and any(w in got for w in why)


@pytest.mark.parametrize(("name", "value"), ACCEPTED)
def test_an_allowed_setting_is_accepted_by_both(name: str, value: str) -> None:
    recipe = parse_recipe(env_recipe(f'{name} = "{value}"'))
    assert recipe.engine.env == ((name, value),)
    assert manifest_verdict({name: value}, []) is None


@pytest.mark.parametrize(
    ("line", "allow", "ok"),
    [
        ('HF_ENDPOINT = "https://hf-mirror.example"', "", False),
        ('HF_ENDPOINT = "https://hf-mirror.example"', '["huggingface.co"]', False),
        ('HF_ENDPOINT = "https://hf-mirror.example/"', '["hf-mirror.example"]', True),
        ('HF_ENDPOINT = "hf-mirror.example"', "", False),  # an address by its name, with no scheme
        ('VLLM_SOME_PROXY = "10.0.0.1:3128"', "", False),
        ('VLLM_SOME_PROXY = "10.0.0.1:3128"', '["10.0.0.1"]', True),
        ('VLLM_PLUGIN_SOURCE = "git://evil.example/x"', "", False),  # any value with ://
        ('HF_ENDPOINT = "https://u:pw@hf-mirror.example"', '["hf-mirror.example"]', False),
        ('HF_TOKEN = "hf_abcdefghijklmnop"', "", False),  # a secret, signed into every bundle
        ('VLLM_API_KEY = "abc"', "", False),
    ],
)
def test_a_value_that_names_a_host_needs_allow_network(line: str, allow: str, ok: bool) -> None:
    name, value = (x.strip().strip('"') for x in line.split("=", 1))
    hosts = [h.strip('"') for h in allow.strip("[]").split(",") if h]
    if ok:
        assert parse_recipe(env_recipe(line, allow)).engine.env == ((name, value),)
        assert manifest_verdict({name: value}, hosts) is None
    else:
        err = refused(env_recipe(line, allow))
        assert any(x.startswith(f"engine.env.{name}:") for x in err.problems)
        assert manifest_verdict({name: value}, hosts) is not None
        if "TOKEN" in name or "KEY" in name or "pw@" in value:
            assert "abcdefghijklmnop" not in err.message and "pw@" not in err.message


def _calls_envtable_problem(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "problem"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "envtable"
        for n in ast.walk(tree)
    )


def test_the_recipe_and_the_manifest_parser_share_one_rule() -> None:
    """Structural: both parsers call envtable.problem, and the allow-list (and the old deny-list names)
    appear in neither: there is no second copy of the rule to drift."""
    parsers = [ROOT / "lockbuild" / "recipe" / "parse.py", ROOT / "lockbuild" / "bundle" / "installparse.py"]
    for path in parsers:
        assert _calls_envtable_problem(path), f"{path.name} does not call envtable.problem"
        text = path.read_text(encoding="utf-8")
        for marker in ('"HF_"', '"VLLM_"', '"LD_"', '"PYTHON"', "ALLOWED_PREFIXES", "DO_NOT_TRACK"):
            assert marker not in text, f"{path.name} holds a rule of its own ({marker})"
    for name in REFUSED_NAMES:
        assert envtable.problem(name, "x", allow_network=()) is not None


def test_every_allowed_prefix_has_its_reason_in_the_docs() -> None:
    docs = (ROOT / "docs" / "release-engineers.md").read_text(encoding="utf-8")
    for prefix in (*envtable.ALLOWED_PREFIXES, *envtable.ALLOWED_NAMES):
        shown = f"`{prefix}*`" if prefix.endswith("_") else f"`{prefix}`"
        assert shown in docs, f"docs/release-engineers.md does not list {shown} with its reason"


@pytest.mark.parametrize("url", ["https://[download.pytorch.org/whl/cu128", "https://[::1/whl"])
def test_a_recipe_url_no_parser_can_read_is_a_recipe_problem(url: str) -> None:
    err = refused(ENGINE + build(f'index = {{ url = "{url}", packages = ["torch"] }}'))
    assert err.exit_code == 2
    line = next(x for x in err.problems if x.startswith("builds[0].index.url:"))
    assert "not a readable URL" in line
