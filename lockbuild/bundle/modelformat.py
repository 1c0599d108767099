"""The one allow-list of a model's file formats: which files a broad pattern may take, which are code, and
which are written in stored frames. No other module names a model file's suffix
(``tests/recipe/test_model_recipe.py::test_no_other_module_defines_a_model_suffix_list``). A pickle or unknown
format (``.bin``, ``.pt``, ``.onnx``, …) is taken only when a pattern names it; ``.py`` is reported as code."""

from __future__ import annotations

from typing import Literal

SAFE_SUFFIXES = frozenset((".safetensors", ".gguf", ".json", ".txt", ".md", ".model", ".tiktoken", ".jinja"))
CODE_SUFFIXES = frozenset((".py",))
# Files written in stored (uncompressed) frames: weights, which do not compress (docs/bundle-format.md).
WEIGHT_SUFFIXES = frozenset(
    (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".pkl", ".ckpt", ".onnx", ".h5", ".msgpack", ".npz", ".npy")
)
# The recipe's default selection (recipe/selection.py): weights, configuration, tokenizer, text.
DEFAULT_INCLUDE = ("*.safetensors", "*.json", "tokenizer*", "*.txt", "*.model", "*.tiktoken")
UNSAFE = "pickle or not a known safe format"
CODE = "code"

Format = Literal["safe", "code", "unsafe"]


def suffix(path: str) -> str:
    """The lower-cased suffix of a repo path's last part (``""`` for ``LICENSE`` or ``.gitattributes``)."""
    name = path.rpartition("/")[2]
    stem, dot, ext = name.rpartition(".")
    return "." + ext.lower() if dot and stem else ""


def format_of(path: str) -> Format:
    """Whether ``path`` is a known safe format, code, or a pickle or not a known safe format."""
    ext = suffix(path)
    if ext == "" or ext in SAFE_SUFFIXES:
        return "safe"
    return "code" if ext in CODE_SUFFIXES else "unsafe"


def names(pattern: str, path: str) -> bool:
    """Whether ``pattern`` names ``path`` explicitly: the path itself, or a pattern ending in its suffix."""
    ext = suffix(path)
    return pattern == path or (ext != "" and pattern.lower().endswith(ext))


def is_weight(path: str) -> bool:
    """Whether a model file is written in a stored frame."""
    return suffix(path) in WEIGHT_SUFFIXES


# How a registry view (ModelPack, registry/modelpack.py) describes a file: its role and its weights' format.
_DOC_NAMES = ("readme", "license", "licence", "notice", "copying", "changelog", "citation", "model_card")
_DOC_ENDINGS = (".md", ".rst", ".pdf", ".html", ".gitattributes", ".gitignore")
_CODE_ENDINGS = (".py", ".ipynb", ".sh", ".js", ".cu", ".cpp", ".c", ".h")
_WEIGHT_FORMATS = {
    ".safetensors": "safetensors",
    ".gguf": "gguf",
    ".onnx": "onnx",
    ".bin": "pytorch",
    ".pt": "pytorch",
    ".pth": "pytorch",
    ".h5": "tensorflow",
    ".msgpack": "flax",
}

Role = Literal["weight", "code", "doc", "config"]


def role(path: str) -> Role:
    """What a model file is, by its name: weights (written in stored frames), code, documentation, or else
    configuration (config.json, the tokenizer, indexes)."""
    name = path.rpartition("/")[2].lower()
    if is_weight(name):
        return "weight"
    if name.endswith(_CODE_ENDINGS):
        return "code"
    if name.startswith(_DOC_NAMES) or name.endswith(_DOC_ENDINGS):
        return "doc"
    return "config"


def weight_format(path: str) -> str:
    """The weights' format a weight file is in, by its suffix (``""`` when none is known)."""
    return _WEIGHT_FORMATS.get(suffix(path), "")
