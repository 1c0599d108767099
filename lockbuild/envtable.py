"""``[engine.env]``: the engine's runtime settings (e.g. ``HF_HUB_OFFLINE = "1"``). Pure rules, shared by the
recipe (builder) and the signed manifest's [install] table (node), so both refuse the same things: each
calls ``problem`` and holds no rule of its own. A name is allowed only if the allow-list names it;
``docs/release-engineers.md`` lists each prefix with its reason."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlsplit

from lockbuild.wire.urls import secret_parameter

NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
MAX_VALUE = 4096
MAX_ENTRIES = 64

# Each prefix: who reads it, and why an offline engine needs it (docs/release-engineers.md shows this list).
ALLOWED_PREFIXES: dict[str, str] = {
    "HF_": "the Hugging Face Hub client: HF_HUB_OFFLINE=1, HF_HOME (where models are found offline)",
    "TRANSFORMERS_": "transformers: TRANSFORMERS_OFFLINE=1 (no download attempt before loading)",
    "TOKENIZERS_": "Hugging Face tokenizers: TOKENIZERS_PARALLELISM (its thread pool across a fork)",
    "VLLM_": "vLLM's own settings: VLLM_NO_USAGE_STATS=1, VLLM_ATTENTION_BACKEND",
    "SGLANG_": "SGLang's own settings",
    "LLAMA_": "llama.cpp's server, which reads its options as LLAMA_ARG_*",
    "GGML_": "ggml, llama.cpp's tensor library (GGML_CUDA_* backend choices)",
    "CUDA_": "the CUDA runtime: CUDA_VISIBLE_DEVICES, CUDA_MODULE_LOADING, CUDA_CACHE_PATH",
    "NCCL_": "NCCL, the multi-GPU collectives: NCCL_P2P_DISABLE, NCCL_IB_DISABLE on nodes without InfiniBand",
    "TORCH_": "PyTorch: TORCH_HOME (torch.hub's cache), TORCH_CUDA_ARCH_LIST",
    "PYTORCH_": "PyTorch's CUDA allocator and device check: PYTORCH_CUDA_ALLOC_CONF, PYTORCH_NVML_BASED_CUDA_CHECK",
    "TRITON_": "Triton, whose kernels vLLM and SGLang compile at first run: TRITON_CACHE_DIR (writable, offline)",
    "FLASHINFER_": "FlashInfer, which otherwise fetches kernels at first run: where its cached kernels are",
    "OMP_": "the OpenMP runtime of CPU engines: OMP_NUM_THREADS",
    "TIKTOKEN_": "tiktoken and openai-harmony, which otherwise fetch their encodings at first use: "
    "TIKTOKEN_ENCODINGS_BASE, TIKTOKEN_CACHE_DIR (where the bundled encodings are)",
}
ALLOWED_NAMES: dict[str, str] = {
    "DO_NOT_TRACK": "the cross-tool opt-out of usage statistics (consoledonottrack.com), honoured by vLLM and others",
}
# A secret in a recipe would be signed into, and published with, every bundle.
_SECRET_NAME = re.compile(r".*_(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|KEY|CREDENTIALS?)")
_SWITCH_VALUES = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off"})  # HF_HUB_DISABLE_IMPLICIT_TOKEN=1
# Names whose value is a network address (and any value with "://"): the host must be in allow-network.
_ADDRESS_NAME = re.compile(r".*_(ENDPOINT|PROXY|URL|HOST)")


# Only for a clearer message: these are refused because they are not on the allow-list, like any other name.
_STEERING = frozenset({"PATH", "HOME", "SHELL", "IFS", "ENV", "BASH_ENV", "VIRTUAL_ENV", "TMPDIR", "PS4"})
_STEERING_PREFIXES = ("LD_", "PYTHON", "LOCKBUILD_", "DYLD_", "BASH_FUNC")


def allowed_name(name: str) -> bool:
    """Whether ``name`` is in the allow-list (a prefix or an exact name)."""
    return name in ALLOWED_NAMES or name.startswith(tuple(ALLOWED_PREFIXES))


def _address_host(value: str) -> str:
    """The host a value names: a URL's, or the value itself read as ``host[:port][/path]``."""
    parts = urlsplit(value if "://" in value else f"//{value}")
    try:
        return (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return ""


def problem(name: object, value: object, *, allow_network: Sequence[str]) -> str | None:
    """Why ``name = value`` is not a valid runtime setting, or None. ``allow_network``: the hosts the
    recipe's ``allow-network`` names (the only hosts a value may name).

    A name must be in ``ALLOWED_PREFIXES`` or ``ALLOWED_NAMES`` (``bin/activate`` exports it to every program
    in the operator's shell, so ``PROMPT_COMMAND`` or ``HTTPS_PROXY`` would steer more than the engine), and
    not hold a secret (``HF_TOKEN``, ``VLLM_API_KEY``): a recipe is signed into every bundle. A value is plain
    printable text; one that names a network address (a name ending in ``_ENDPOINT``, ``_PROXY``, ``_URL`` or
    ``_HOST``, or a value with ``://``) names a host in ``allow_network`` and carries no credential."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return f"expected a name like HF_HUB_OFFLINE (A-Z, 0-9, _; not starting with a digit), found {str(name)[:60]!r}"
    if not isinstance(value, str):
        return f'expected a string value (quote numbers: {name} = "1"), found {type(value).__name__}'
    if len(value) > MAX_VALUE:
        return f"expected a value of at most {MAX_VALUE} characters, found {len(value)}"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in value):
        return f"the value of {name} holds a control character (newline, NUL, escape ...); expected plain text"
    if not allowed_name(name):
        if name in _STEERING or name.startswith(_STEERING_PREFIXES):  # the reason, for the names most often tried
            return (
                f"{name} steers the loader, the interpreter or the shell, not the engine; it may not be set here "
                f"(only names on the allow-list: {', '.join(ALLOWED_PREFIXES)}, {', '.join(ALLOWED_NAMES)})"
            )
        return (
            f"{name} is not a setting an engine library reads; expected a name starting with one of "
            f"{', '.join(ALLOWED_PREFIXES)} or one of {', '.join(ALLOWED_NAMES)} (docs/release-engineers.md gives "
            "each one's reason): a setting is exported to every program of an activated shell, so only names "
            "an engine library reads may be set here"
        )
    if _SECRET_NAME.fullmatch(name) and value.strip().lower() not in _SWITCH_VALUES:
        return (
            f"{name} names a secret (its value is not shown), and a recipe is signed into every bundle; "
            "expected no secret in [engine.env]: give it on the node, at run time"
        )
    if "://" in value or _ADDRESS_NAME.fullmatch(name):
        if value and secret_parameter(value if "://" in value else f"//{value}") is not None:
            return f"the value of {name} holds a credential (its value is not shown); expected none in a recipe"
        host = _address_host(value)
        allowed = {h.rstrip(".").lower() for h in allow_network}
        if value and host not in allowed:
            return (
                f"the value of {name} names a network address (host {host[:60] or 'unreadable'!r}), which the "
                f"recipe's allow-network does not name ({', '.join(sorted(allowed)) or 'none'}); expected only "
                "hosts the self-test lets the engine reach: add the host to allow-network, or leave the setting out"
            )
    return None


HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45}")
MAX_SMOKE_WORDS = 64


def host_problem(value: object) -> str | None:
    """Why ``value`` is not a host name or IP address for ``allow-network``, or None."""
    if not isinstance(value, str) or not HOST.fullmatch(value):
        return f"expected a host name or IP address (no scheme, port or path), found {str(value)[:60]!r}"
    return None


def word_problem(value: object) -> str | None:
    """Why ``value`` is not a word of a command (``smoke``), or None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_VALUE:
        return "expected non-empty strings of at most 4096 characters"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in value):
        return f"{value[:60]!r} holds a control character"
    return None


PREFIX = "{prefix}"  # in a value: the environment's own final path, filled in by the installer


def expand_prefix(
    env: Sequence[tuple[str, str]], prefix: str, *, allow_network: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """``env`` with ``{prefix}`` in each value replaced by ``prefix`` (the environment's final path: an
    install's directory, an image's --prefix; never a staging path), each expanded value checked by the
    same rules again (``problem``); ValueError names the first that fails."""
    out = []
    for name, value in env:
        if PREFIX not in value:
            out.append((name, value))
            continue
        expanded = value.replace(PREFIX, prefix)
        why = problem(name, expanded, allow_network=allow_network)
        if why is not None:
            raise ValueError(f"{name} = {value!r} with {PREFIX} as {prefix!r}: {why}")
        out.append((name, expanded))
    return tuple(out)
