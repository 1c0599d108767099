"""The model recipe ([model]) and the pure selection rules (include, exclude, pickles)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT

from lockbuild.errors import RecipeError
from lockbuild.recipe.modelrecipe import is_model_recipe, load_model_recipe, parse_model_recipe
from lockbuild.recipe.selection import DEFAULT_INCLUDE, select

COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
GOOD = f'''
[model]
name = "qwen2.5-0.5b-instruct"
repo = "Qwen/Qwen2.5-0.5B-Instruct"
revision = "{COMMIT}"
'''


def _problems(text: str) -> str:
    with pytest.raises(RecipeError) as e:
        parse_model_recipe(text, "m.toml")
    assert e.value.exit_code == 2
    return e.value.message


def test_a_good_recipe_parses_with_the_default_selection() -> None:
    r = parse_model_recipe(GOOD, "m.toml")
    assert (r.name, r.repo, r.revision, r.org) == (
        "qwen2.5-0.5b-instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        COMMIT,
        "Qwen",
    )
    assert r.include == DEFAULT_INCLUDE and r.exclude == ()
    assert is_model_recipe(GOOD) and not is_model_recipe("[engine]\nname = 'x'\n")


def test_the_catalogue_recipe_parses() -> None:
    r = load_model_recipe(REPO_ROOT / "bundles/models/qwen2.5-0.5b-instruct.toml")
    assert r.repo == "Qwen/Qwen2.5-0.5B-Instruct" and r.revision == COMMIT


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", COMMIT[:12], COMMIT.upper(), COMMIT + "\n"])
def test_a_branch_tag_or_short_revision_is_a_recipe_problem(revision: str) -> None:
    msg = _problems(GOOD.replace(f'"{COMMIT}"', repr(revision).replace("'", '"')))
    assert "model.revision" in msg and "commit" in msg


def test_revision_is_required() -> None:
    assert "model.revision: missing" in _problems(GOOD.replace(f'revision = "{COMMIT}"', ""))


def test_unknown_keys_get_did_you_mean_and_every_problem_is_listed() -> None:
    msg = _problems(
        GOOD.replace("[model]", '[model]\nincludes = ["*.json"]\nrevison = "x"').replace(
            '"Qwen/Qwen2.5-0.5B-Instruct"', '"../etc"'
        )
    )
    assert "model.includes: unknown key; did you mean 'include'?" in msg
    assert "model.revison: unknown key; did you mean 'revision'?" in msg
    assert "model.repo" in msg and "3 problems" in msg


@pytest.mark.parametrize("repo", ["Qwen", "a/b/c", "/abs", "a/..", "a/b--c", "a/-b", "a/b c"])
def test_a_repo_that_is_not_an_id_is_refused(repo: str) -> None:
    assert "model.repo" in _problems(GOOD.replace('"Qwen/Qwen2.5-0.5B-Instruct"', f'"{repo}"'))


def test_a_top_level_typo_gets_did_you_mean() -> None:
    assert "did you mean 'model'" in _problems(GOOD.replace("[model]", "[modle]"))


@pytest.mark.parametrize("pattern", ["", "/abs/*", "a\\\\b", "x\\u0007"])
def test_bad_patterns_are_refused(pattern: str) -> None:
    assert "model.include" in _problems(GOOD + f'include = ["{pattern}"]\n')


PATHS = (
    "config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "pytorch_model.bin",
    "training_args.pkl",
    "original/consolidated.pth",
    "original/params.json",
    "sub/dir/extra.safetensors",
    "README.md",
    "tokenizer.pt",
)


def test_default_selection_takes_weights_config_tokenizer_and_no_pickle() -> None:
    s = select(PATHS, DEFAULT_INCLUDE, ())
    assert "pytorch_model.bin" not in s.taken and "tokenizer.pt" not in s.taken and s.pickles == ()
    assert "tokenizer.pt" in s.left_out_pickles  # tokenizer* matched it, but does not name a pickle
    assert "README.md" not in s.taken
    assert "sub/dir/extra.safetensors" in s.taken and "original/params.json" in s.taken  # * crosses /


def test_exclude_wins_over_include() -> None:
    s = select(PATHS, DEFAULT_INCLUDE, ("original/*",))
    assert not [p for p in s.taken if p.startswith("original/")]
    assert "original/params.json" not in select(PATHS, DEFAULT_INCLUDE, ("original/",)).taken  # a folder


def test_star_alone_never_brings_a_pickle() -> None:
    s = select(PATHS, ("*",), ())
    assert not [p for p in s.taken if p.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert "README.md" in s.taken


def test_a_pickle_named_explicitly_is_taken_and_reported() -> None:
    s = select(PATHS, ("*.json", "pytorch_model.bin"), ())
    assert s.pickles == ("pytorch_model.bin",) and "pytorch_model.bin" in s.taken
    s = select(PATHS, ("*.bin", "*.pth"), ("original/*",))
    assert s.pickles == ("pytorch_model.bin",)
    s = select(PATHS, ("original/*.pth",), ())
    assert s.pickles == ("original/consolidated.pth",)


def test_matching_is_case_sensitive_like_the_hub_client_on_posix() -> None:
    assert select(("Config.JSON",), ("*.json",), ()).taken == ()


# Pickles, and files of formats lockbuild does not know to be safe: what `include = ["*"]` must not take.
NOT_KNOWN_SAFE = (
    "pytorch_model.bin",
    "w.pt",
    "w.pth",
    "args.pkl",
    "model.ckpt",
    "scaler.pickle",
    "clf.joblib",
    "emb.npy",
    "arrays.npz",
    "model.onnx",
    "tf_model.h5",
    "sub/Upper.CKPT",
)
KNOWN_SAFE = (
    ".gitattributes",
    "LICENSE",
    "README",
    "README.md",
    "chat_template.jinja",
    "config.json",
    "merges.txt",
    "model.gguf",
    "model.safetensors",
    "qwen.tiktoken",
    "tokenizer.model",
)


def test_star_takes_no_file_that_is_not_a_known_safe_format() -> None:
    s = select(KNOWN_SAFE + NOT_KNOWN_SAFE + ("modeling_tiny.py",), ("*",), ())
    assert s.taken == (*KNOWN_SAFE, "modeling_tiny.py")
    assert s.left_out_pickles == NOT_KNOWN_SAFE and s.pickles == ()
    assert s.code == ("modeling_tiny.py",)  # code is taken like a safe file, and reported as code


@pytest.mark.parametrize("path", NOT_KNOWN_SAFE)
def test_a_file_not_known_safe_comes_only_when_named_by_its_path_or_its_suffix(path: str) -> None:
    ext = "." + path.rpartition(".")[2]
    assert select((path,), ("*", "*.json", "*.bin" if ext != ".bin" else "*.pt"), ()).taken == ()
    assert select((path,), (path,), ()).pickles == (path,)
    assert select((path,), ("*" + ext,), ()).pickles == (path,)  # matching is case-sensitive, as the Hub client


def test_the_catalogue_model_takes_the_same_files() -> None:
    """The Qwen recipe's selection over its revision's files (as the Hub lists them) is what its bundle holds."""
    r = load_model_recipe(REPO_ROOT / "bundles/models/qwen2.5-0.5b-instruct.toml")
    listed = (".gitattributes", "LICENSE", "README.md", "config.json", "generation_config.json", "merges.txt")
    listed += ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.json")
    s = select(listed, r.include, r.exclude)
    assert s.taken == listed[3:] and s.pickles == s.left_out_pickles == s.code == ()


def test_no_other_module_defines_a_model_suffix_list() -> None:
    """The one allow-list (bundle/modelformat.py) is the only module that names a model file's suffix."""
    import ast

    from lockbuild.bundle import modelformat

    generic = {".json", ".txt", ".md", ".py"}  # suffixes other files have too (records, sources, docs)
    model_only = (modelformat.SAFE_SUFFIXES | modelformat.WEIGHT_SUFFIXES) - generic
    model_only |= {s.lower() for p in NOT_KNOWN_SAFE for s in ["." + p.rpartition(".")[2]]}
    root = Path(modelformat.__file__).parent.parent
    # Python's own .pth start-up files in an environment's site-packages, not a model's file
    other_meaning = {("install/envfiles.py", ".pth"), ("selftest/watch.py", ".pth")}
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == Path(modelformat.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 40:
                rel = str(path.relative_to(root))
                if (rel, node.value) not in other_meaning and any(node.value.lower().endswith(s) for s in model_only):
                    found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert found == [], "a model file suffix named outside bundle/modelformat.py"
