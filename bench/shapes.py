"""Workload shapes: which wheels, and how big, a benchmark index serves.

VLLM_0_11_0 is the real file set of vLLM 0.11.0 for CPython 3.12 on x86_64 manylinux_2_28: one wheel
per package, as pip or uv would pick it. Where it comes from (run on 2025-11-29 against pypi.org):

    uv pip compile req.in  # req.in: vllm==0.11.0
        --python-version 3.12 --python-platform x86_64-manylinux_2_28
        --exclude-newer 2025-10-05T01:40:00Z --format pylock.toml -o pylock.toml

then, for each of the 141 packages, the wheel whose tags rank best for cp312 / manylinux_2_28_x86_64
(packaging.tags priority), with the size PyPI lists for it. Total: 4,916,112,691 bytes; the ten wheels
over 150 MB (torch, cuDNN, cuBLAS, vllm itself, NCCL, cuSPARSE, cuSPARSELt, cuSOLVER, cuFFT, triton)
hold 84 % of the bytes, and 96 of the 141 are under 1 MB.

``scaled`` keeps the names, versions and the number of files, and scales every size by one factor so
the total reaches a target (e.g. 1 GB), with a floor so tiny wheels stay real wheels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# (project, version, size in bytes of the chosen wheel on PyPI), largest first.
VLLM_0_11_0: tuple[tuple[str, str, int], ...] = (
    ("torch", "2.8.0", 887_913_624),
    ("nvidia-cudnn-cu12", "9.10.2.21", 706_758_467),
    ("nvidia-cublas-cu12", "12.8.4.1", 594_346_921),
    ("vllm", "0.11.0", 438_217_982),
    ("nvidia-nccl-cu12", "2.27.3", 322_364_134),
    ("nvidia-cusparse-cu12", "12.5.8.93", 288_216_466),
    ("nvidia-cusparselt-cu12", "0.7.1", 287_193_691),
    ("nvidia-cusolver-cu12", "11.7.3.90", 267_506_905),
    ("nvidia-cufft-cu12", "11.3.3.83", 193_118_695),
    ("triton", "3.4.0", 155_560_068),
    ("xformers", "0.0.32.post1", 117_199_943),
    ("cupy-cuda12x", "13.6.0", 112_886_268),
    ("nvidia-cuda-nvrtc-cu12", "12.8.93", 88_040_029),
    ("ray", "2.49.2", 70_114_942),
    ("nvidia-curand-cu12", "10.3.9.90", 63_619_976),
    ("opencv-python-headless", "4.12.0.88", 54_023_419),
    ("llvmlite", "0.44.0", 42_361_901),
    ("nvidia-nvjitlink-cu12", "12.8.93", 39_254_836),
    ("scipy", "1.16.2", 35_673_281),
    ("numpy", "2.2.6", 16_527_618),
    ("llguidance", "0.7.30", 15_004_926),
    ("transformers", "4.56.2", 11_608_055),
    ("nvidia-cuda-cupti-cu12", "12.8.90", 10_248_621),
    ("xgrammar", "0.1.25", 8_712_184),
    ("torchvision", "0.23.0", 8_627_108),
    ("pillow", "11.3.0", 6_645_236),
    ("mistral-common", "1.8.5", 6_515_140),
    ("pycountry", "24.6.1", 6_335_189),
    ("sympy", "1.14.0", 6_299_353),
    ("uvloop", "0.21.0", 4_693_770),
    ("torchaudio", "2.8.0", 4_014_607),
    ("numba", "0.61.2", 3_885_928),
    ("tokenizers", "0.22.1", 3_250_221),
    ("hf-xet", "1.1.10", 3_186_960),
    ("openai-harmony", "0.0.4", 3_049_306),
    ("outlines-core", "0.2.11", 2_287_677),
    ("networkx", "3.5", 2_034_406),
    ("pydantic-core", "2.33.2", 2_002_028),
    ("aiohttp", "3.12.15", 1_719_929),
    ("sentencepiece", "0.2.1", 1_387_881),
    ("soundfile", "0.13.1", 1_313_646),
    ("setuptools", "79.0.1", 1_256_281),
    ("pygments", "2.19.2", 1_225_217),
    ("nvidia-cufile-cu12", "1.13.1.3", 1_197_834),
    ("tiktoken", "0.11.0", 1_183_308),
    ("openai", "2.1.0", 964_939),
    ("nvidia-cuda-runtime-cu12", "12.8.90", 954_765),
    ("rignore", "0.7.0", 951_058),
    ("pyzmq", "27.1.0", 840_995),
    ("pyyaml", "6.0.3", 807_870),
    ("regex", "2025.9.18", 802_011),
    ("huggingface-hub", "0.35.3", 564_262),
    ("mpmath", "1.3.0", 536_198),
    ("httptools", "0.6.4", 510_837),
    ("safetensors", "0.6.2", 485_835),
    ("watchfiles", "1.1.0", 452_213),
    ("pydantic", "2.11.10", 444_823),
    ("msgpack", "1.1.1", 426_905),
    ("blake3", "1.0.7", 387_936),
    ("rpds-py", "0.27.1", 386_883),
    ("sentry-sdk", "2.39.0", 370_851),
    ("yarl", "1.20.1", 355_616),
    ("jiter", "0.11.0", 347_932),
    ("dnspython", "2.8.0", 331_094),
    ("protobuf", "6.32.1", 322_013),
    ("psutil", "7.1.0", 291_163),
    ("cbor2", "5.7.0", 284_948),
    ("multidict", "6.6.4", 256_100),
    ("rich", "14.1.0", 243_368),
    ("frozenlist", "1.7.0", 241_820),
    ("soxr", "1.0.0", 238_032),
    ("propcache", "0.3.2", 224_395),
    ("cffi", "2.0.0", 219_572),
    ("msgspec", "0.19.0", 213_594),
    ("fsspec", "2025.9.0", 199_289),
    ("websockets", "15.0.1", 182_523),
    ("ninja", "1.13.0", 180_716),
    ("compressed-tensors", "0.11.0", 179_951),
    ("certifi", "2025.8.3", 161_216),
    ("charset-normalizer", "3.4.3", 151_830),
    ("jinja2", "3.1.6", 134_899),
    ("urllib3", "2.5.0", 129_795),
    ("dill", "0.4.0", 119_668),
    ("pycparser", "2.23", 118_140),
    ("lark", "1.2.2", 111_036),
    ("anyio", "4.11.0", 109_097),
    ("click", "8.3.0", 107_295),
    ("fastapi", "0.118.0", 97_694),
    ("gguf", "0.17.1", 96_224),
    ("jsonschema", "4.25.1", 90_040),
    ("nvidia-nvtx-cu12", "12.8.90", 89_954),
    ("markdown-it-py", "4.0.0", 87_321),
    ("httpcore", "1.0.9", 78_784),
    ("tqdm", "4.67.1", 78_540),
    ("starlette", "0.48.0", 73_736),
    ("httpx", "0.28.1", 73_517),
    ("pybase64", "1.4.2", 71_587),
    ("idna", "3.10", 70_442),
    ("uvicorn", "0.37.0", 67_976),
    ("packaging", "25.0", 66_469),
    ("requests", "2.32.5", 64_738),
    ("einops", "0.8.1", 64_359),
    ("attrs", "25.3.0", 63_815),
    ("prometheus-client", "0.23.1", 61_145),
    ("fastrlock", "0.8.3", 53_924),
    ("typer", "0.19.2", 46_748),
    ("diskcache", "5.6.3", 45_550),
    ("lm-format-enforcer", "0.11.3", 45_418),
    ("typing-extensions", "4.15.0", 44_614),
    ("depyf", "0.19.0", 39_034),
    ("pydantic-extra-types", "2.10.5", 38_315),
    ("h11", "0.16.0", 37_515),
    ("email-validator", "2.3.0", 35_604),
    ("setproctitle", "1.3.7", 32_932),
    ("rich-toolkit", "0.15.1", 29_412),
    ("astor", "0.8.1", 27_488),
    ("referencing", "0.36.2", 26_775),
    ("python-multipart", "0.0.20", 24_546),
    ("interegular", "0.3.3", 23_635),
    ("markupsafe", "3.0.3", 22_947),
    ("py-cpuinfo", "9.0.0", 22_335),
    ("cloudpickle", "3.1.1", 20_992),
    ("python-dotenv", "1.1.1", 20_556),
    ("distro", "1.9.0", 20_277),
    ("fastapi-cloud-cli", "0.3.0", 19_921),
    ("prometheus-fastapi-instrumentator", "7.1.0", 19_296),
    ("jsonschema-specifications", "2025.9.1", 18_437),
    ("frozendict", "2.4.6", 16_146),
    ("filelock", "3.19.1", 15_988),
    ("aiohappyeyeballs", "2.6.1", 15_265),
    ("python-json-logger", "3.3.0", 15_163),
    ("typing-inspection", "0.4.2", 14_611),
    ("annotated-types", "0.7.0", 13_643),
    ("cachetools", "6.2.0", 11_276),
    ("fastapi-cli", "0.0.13", 11_142),
    ("six", "1.17.0", 11_050),
    ("partial-json-parser", "0.2.1.1.post6", 10_876),
    ("sniffio", "1.3.1", 10_235),
    ("mdurl", "0.1.2", 9_979),
    ("shellingham", "1.5.4", 9_755),
    ("aiosignal", "1.4.0", 7_490),
)

ENGINE_ROW = "vllm"  # the engine itself: the synthetic engine takes this row's size
FLOOR = 4096  # no generated wheel is made smaller than min(real size, FLOOR)


@dataclass(frozen=True)
class Dist:
    """One wheel of a workload: project, version and target file size in bytes."""

    name: str
    version: str
    size: int


def scaled(rows: Sequence[tuple[str, str, int]], total: int, *, floor: int = FLOOR) -> tuple[Dist, ...]:
    """The rows with sizes scaled by one factor so that they add up to ``total`` (within 0.1 %)."""

    def size_at(f: float, real: int) -> int:
        return max(round(real * f), min(real, floor))

    lo, hi = 0.0, total / max(1, min(r[2] for r in rows))
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(size_at(mid, r[2]) for r in rows) < total:
            lo = mid
        else:
            hi = mid
    return tuple(Dist(name, version, size_at(hi, real)) for name, version, real in rows)


def real_total(rows: Sequence[tuple[str, str, int]] = VLLM_0_11_0) -> int:
    return sum(r[2] for r in rows)
