"""The fit of a build, from its packages' kernels: the rules the issue states, on vLLM 0.33.0's libraries
as NVIDIA's cuobjdump lists them."""

from __future__ import annotations

from lockbuild.gpu.fatbin import Kernels
from lockbuild.gpu.fit import coverage, cuda_of, default_gate, fit_from_json, measure
from lockbuild.gpu.vocab import parse_arch


def k(sass: str = "", ptx: str = "") -> Kernels:
    def archs(text: str) -> tuple:
        return tuple(sorted(a for a in (parse_arch(x) for x in text.split()) if a))

    return Kernels(archs(sass), archs(ptx))


VLLM = {
    "torch": [("torch/lib/libtorch_cuda.so", k("7.5 8.0 8.6 8.9 9.0 10.0 10.3 12.0 12.1"))],
    "vllm": [
        ("vllm/_C_stable_libtorch.abi3.so", k("7.5 8.0 8.6 8.9 9.0 10.0 12.0", "8.0 8.9 9.0")),
        ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", k("8.0")),
        ("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", k("9.0a")),
    ],
    "nvidia-cublas": [("nvidia/cu13/lib/libcublasLt.so.13", k("7.5 8.0 9.0 10.0 12.0", "12.0"))],
}
VERSIONS = {"nvidia-cuda-runtime": "13.0.96", "torch": "2.9.0", "vllm": "0.33.0"}


def test_the_fit_of_vllm() -> None:
    fit = measure(VLLM, VERSIONS, (), default_gate("vllm"))
    data = fit.to_json()
    assert {key: data[key] for key in ("cuda", "min_driver", "min_capability", "max_capability", "jit_beyond")} == {
        "cuda": "13.0",
        "min_driver": "580.65.06",
        "min_capability": "7.5",
        "max_capability": "12.1",
        "jit_beyond": False,
    }
    assert data["ptx"] == ["8.0", "8.9", "9.0"]
    assert "9.0a" in data["sass"] and "12.1" in data["sass"]
    vllm = next(p for p in data["packages"] if p["name"] == "vllm")
    fa2 = next(lib for lib in vllm["libraries"] if lib["file"].endswith("_vllm_fa2_C.abi3.so"))
    assert fa2 == {"file": "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "sass": ["8.0"], "ptx": []}
    assert [p["gated"] for p in data["packages"]] == [False, True, True]  # nvidia-cublas, torch, vllm
    assert fit.line() == (
        "GPU fit: CUDA 13.0 (driver >= 580.65.06), kernels for 7.5-12.1 (torch, vllm); "
        "flash-attention 2: 8.0 only; flash-attention 3: 9.0a only"
    )


def test_the_rules_of_a_capability() -> None:
    assert coverage(k("8.0"), (8, 6)) == "sass"  # plain SASS: the same major at or below
    assert coverage(k("8.6"), (8, 0)) is None
    assert coverage(k("8.0"), (9, 0)) is None
    assert coverage(k("10.0f"), (10, 3)) == "sass"  # family SASS
    assert coverage(k("9.0a"), (9, 0)) == "sass" and coverage(k("10.0a"), (10, 3)) is None  # arch-specific: exactly
    assert coverage(k("", "8.0"), (12, 0)) == "jit"  # PTX at or below: JIT
    assert coverage(k("", "9.0"), (8, 9)) is None


def test_a_range_is_never_assumed() -> None:
    """7.5-12.1 has no 11.x kernels: the node asks the per-package lists for its own capability."""
    fit = measure(VLLM, VERSIONS, (), default_gate("vllm"))
    assert fit.coverage((11, 0)) is None and fit.lacking((11, 0)) == ("torch",)  # vllm: PTX 8.0
    assert fit.coverage((7, 0)) is None
    assert fit.coverage((8, 6)) == "sass"


def test_kernels_from_names_the_gate_and_ptx_only_means_jit_beyond() -> None:
    readings = {"sgl-kernel": [("sgl_kernel/common_ops.so", k("9.0", "9.0"))], "sglang": []}
    fit = measure(readings, {}, ("13",), default_gate("sglang", ("sgl-kernel",)))
    assert fit.jit_beyond and fit.coverage((12, 0)) == "jit" and fit.cuda == "13.0"
    assert fit.to_json()["min_capability"] == "9.0"


def test_the_cuda_runtime() -> None:
    assert cuda_of({"nvidia-cuda-runtime-cu12": "12.8.90"}, ()) == "12.8"
    assert cuda_of({}, ("12.8.57", "12")) == "12.8"
    assert cuda_of({}, ()) is None


def test_a_fit_round_trips_through_json() -> None:
    fit = measure(VLLM, VERSIONS, (), default_gate("vllm"))
    back = fit_from_json(fit.to_json())
    assert back is not None and back.to_json() == fit.to_json()
    assert (
        fit_from_json(
            {"packages": [{"name": "x", "gated": True, "libraries": [{"file": "a", "sass": ["x"], "ptx": []}]}]}
        )
        is None
    )


def test_the_recipe_checks_name_both_numbers_and_the_package() -> None:
    from lockbuild.builder.gpufit import contradictions
    from lockbuild.recipe.model import GpuRequirement

    fit = measure(VLLM, VERSIONS, (), default_gate("vllm"))
    assert contradictions(GpuRequirement((7, 5), "580.65.06", (12, 1)), fit) == []
    assert contradictions(GpuRequirement((7, 5), "580.82.07", (12, 0)), fit) == []  # within what was measured
    (high,) = contradictions(GpuRequirement(None, None, (13, 0)), fit)
    assert high.startswith("max-capability 13.0: the highest SASS is 12.1 (vllm stops at 12.0)")
    (low,) = contradictions(GpuRequirement((7, 0), None), fit)
    assert low == "min-capability 7.0: torch, vllm have no kernels for 7.0 (the gated packages start at 7.5)"
    (drv,) = contradictions(GpuRequirement(None, "575"), fit)
    assert drv == "min-driver 575: the CUDA 13.0 runtime of the lock needs driver 580.65.06"
    ptx = measure({"e": [("e/_C.so", k("8.0", "8.0"))]}, {}, (), ("e",))
    assert contradictions(GpuRequirement(None, None, (13, 0)), ptx) == []  # later GPUs fit by JIT


def test_a_packages_deciding_libraries_set_its_floor() -> None:
    """vLLM 0.11.0 as measured: torch's linalg library carries sm_50 and vllm/_C sm_52, but libtorch_cuda.so
    starts at 7.0: the build's floor is 7.0 (a Pascal GPU would fail at its first kernel), never 5.2; and a
    library only some GPUs use (FlashAttention 3, FlashMLA) does not narrow vLLM's fit."""
    libs = {
        "torch": [
            ("torch/lib/libtorch_cuda.so", k("7.0 7.5 8.0 8.6 9.0 10.0 12.0")),
            ("torch/lib/libtorch_cuda_linalg.so", k("5.0 6.0 7.0 7.5 8.0 8.6 9.0 10.0 12.0")),
        ],
        "vllm": [
            ("vllm/_C.abi3.so", k("5.2 6.0 7.0 7.5 8.0 8.6 8.9 9.0 10.0 12.0", "12.0")),
            ("vllm/_flashmla_C.abi3.so", k("9.0a 10.0f")),
            ("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", k("9.0a")),
        ],
    }
    fit = measure(libs, {"nvidia-cuda-runtime-cu12": "12.8.90"}, (), default_gate("vllm"))
    assert fit.to_json()["min_capability"] == "7.0"
    assert fit.coverage((6, 1)) is None and fit.lacking((6, 1)) == ("torch",)
    assert fit.coverage((8, 9)) == "sass"  # FlashMLA and FA3 lack 8.9: reported, not gated
    assert not fit.jit_beyond  # libtorch_cuda.so carries no PTX
