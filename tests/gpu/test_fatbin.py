"""The fatbin reader: the architectures it reads from an ELF's ``.nv_fatbin`` are the ones NVIDIA's own
``cuobjdump`` lists, on files the tests write and (where nvcc is installed) on a real compiled library;
hostile ELF and fatbin structures are refused with an error naming the file, never a crash or a hang."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import fatbinkit
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockbuild.gpu.fatbin import BinaryError, Kernels, read_kernels


def _cuobjdump() -> str | None:
    try:
        import nvidia  # the nvidia-cuda-cuobjdump wheel (a test extra)
    except ImportError:
        return shutil.which("cuobjdump")
    for root in getattr(nvidia, "__path__", []):
        for exe in sorted(Path(root).glob("cu*/bin/cuobjdump")):
            return str(exe)
    return shutil.which("cuobjdump")


CUOBJDUMP = _cuobjdump()
NVCC = shutil.which("nvcc")
needs_cuobjdump = pytest.mark.skipif(CUOBJDUMP is None, reason="NVIDIA's cuobjdump (nvidia-cuda-cuobjdump) is absent")


def _read(data: bytes, name: str = "lib.so") -> Kernels:
    return read_kernels(io.BytesIO(data), len(data), name)


def _listed(path: Path) -> tuple[list[str], list[str]]:
    """cuobjdump --list-elf / --list-ptx: the sm of each SASS entry, the arch of each PTX entry."""
    assert CUOBJDUMP is not None
    out = subprocess.run([CUOBJDUMP, "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True, check=True)
    sass = re.findall(r"ELF file\s+\d+: .*\.sm_(\d+)[af]?\.cubin", out.stdout)
    ptx = re.findall(r"PTX file\s+\d+: .*\.sm_(\d+[af]?)\.ptx", out.stdout)
    return sass, ptx


def _sm(arch: str) -> str:
    major, minor = arch.rstrip("af").split(".")
    return f"{major}{minor}{arch[-1] if arch[-1] in 'af' else ''}"


SETS = [
    (("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"), ()),  # libtorch_cuda's
    (("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"), ("8.0", "8.9", "9.0")),  # vllm's _C
    (("8.0",), ()),  # flash-attention 2
    (("9.0a",), ()),  # flash-attention 3
    (("10.0f", "10.3a"), ("12.0f",)),
    ((), ("7.5",)),  # PTX only
]


@needs_cuobjdump
@pytest.mark.parametrize(("sass", "ptx"), SETS)
def test_the_reader_lists_what_cuobjdump_lists(tmp_path: Path, sass: tuple[str, ...], ptx: tuple[str, ...]) -> None:
    lib = tmp_path / "libk.so"
    lib.write_bytes(fatbinkit.cuda_so(sass, ptx))
    kernels = _read(lib.read_bytes())
    assert [str(a) for a in kernels.sass] == sorted(sass, key=lambda a: _sm(a).rjust(4, "0"))
    assert {str(a) for a in kernels.ptx} == set(ptx)
    listed_sass, listed_ptx = _listed(lib)
    assert sorted(listed_sass) == sorted(_sm(a).rstrip("af") for a in sass)  # --list-elf names drop a and f
    assert sorted(listed_ptx) == sorted(_sm(a) for a in ptx)


@needs_cuobjdump
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_reader_agrees_with_cuobjdump_on_a_library_nvcc_compiled(tmp_path: Path) -> None:
    """A real .so: nvcc's layout (several containers, compressed PTX, sm_100+ extended headers), the a and f
    flags as cuobjdump -elf -ptx prints them."""
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    lib = tmp_path / "libk.so"
    gencode = ["arch=compute_75,code=sm_75", "arch=compute_90a,code=sm_90a", "arch=compute_100f,code=sm_100f"]
    gencode += ["arch=compute_80,code=compute_80", "arch=compute_120f,code=compute_120f"]
    cmd = [str(NVCC), "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(source)]
    subprocess.run([*cmd, *(f"-gencode={g}" for g in gencode)], check=True, capture_output=True, timeout=300)
    assert CUOBJDUMP is not None
    out = subprocess.run([CUOBJDUMP, "-elf", "-ptx", str(lib)], capture_output=True, text=True, check=True).stdout
    dumped = re.findall(r"Fatbin (elf|ptx) code:\s*=+\s*arch = sm_(\d+[af]?)", out)
    kernels = _read(lib.read_bytes())
    assert {f"sm_{_sm(str(a))}" for a in kernels.sass} == {f"sm_{sm}" for kind, sm in dumped if kind == "elf"}
    assert {f"sm_{_sm(str(a))}" for a in kernels.ptx} == {f"sm_{sm}" for kind, sm in dumped if kind == "ptx"}
    assert [str(a) for a in kernels.sass] == ["7.5", "9.0a", "10.0f"]
    assert [str(a) for a in kernels.ptx] == ["8.0", "12.0f"]


def test_a_file_without_cuda_code_has_no_kernels() -> None:
    assert _read(b"/* GNU ld script */ INPUT(libc.so.6)").empty
    assert _read(fatbinkit.elf_so({".text": b"\xc3"})).empty
    assert _read(b"\x7fELF\x01\x01" + bytes(58)).empty  # 32-bit


def _hostile() -> dict[str, tuple[bytes, str]]:
    """Each hostile file, and what its refusal must say."""
    good = fatbinkit.cuda_so(("8.0",), ("9.0",))
    text = {".text": b"\xc3" * 16}
    zero_header = fatbinkit.entry("sass", "8.0")[:4] + bytes(4) + bytes(56)  # header size 0, payload 0
    return {
        "truncated in the section table": (good[: len(good) - 10], "past the end of the file"),
        "section table past the file": (fatbinkit.elf_so(text, shoff=1 << 40), "past the end of the file"),
        "more sections than the file holds": (fatbinkit.elf_so(text, shnum=60000), "past the end of the file"),
        "an entry of header size 0 (a loop)": (
            fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(zero_header * 4)}),
            "says its header is 0 bytes",
        ),
        "an entry larger than its container": (
            fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(fatbinkit.entry("sass", "8.0", size=1 << 62))}),
            "both within its container",
        ),
        "a container larger than its section": (
            fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(fatbinkit.entry("sass", "8.0"), size=1 << 40)}),
            "runs past its section's end",
        ),
        "garbage in the section": (fatbinkit.elf_so({".nv_fatbin": b"\x01" * 64}), "expected fatbin 0xba55ed50"),
        "an impossible architecture": (
            fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(fatbinkit.entry("sass", "0.1"))}),
            "expected sm_10 to sm_999",
        ),
    }


@pytest.mark.parametrize("case", list(_hostile()))
def test_a_hostile_structure_is_refused_naming_the_file(case: str) -> None:
    data, says = _hostile()[case]
    with pytest.raises(BinaryError, match=r"^torch/lib/libevil\.so: ") as caught:
        _read(data, "torch/lib/libevil.so")
    assert says in str(caught.value)


def test_too_many_entries_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import lockbuild.gpu.fatbin as fatbin

    monkeypatch.setattr(fatbin, "MAX_ENTRIES", 100)
    empty = fatbinkit.entry("sass", "8.0", b"\0" * 8)
    with pytest.raises(BinaryError, match="over 100 fatbin entries"):
        _read(fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(*[empty] * 101)}))
    assert len(_read(fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(*[empty] * 100)})).sass) == 1


def test_an_oversized_section_is_refused_before_it_is_read() -> None:
    data = bytearray(fatbinkit.cuda_so(("8.0",)))
    # grow the .nv_fatbin section's stated size (section 2's sh_size) far past the file
    shoff = int.from_bytes(data[0x28:0x30], "little")
    data[shoff + 2 * 64 + 32 : shoff + 2 * 64 + 40] = (1 << 50).to_bytes(8, "little")
    with pytest.raises(BinaryError, match=r"its \.nv_fatbin section \(\d+ bytes at byte \d+\) lies past the end"):
        _read(bytes(data))


class _Counting(io.BytesIO):
    """Counts the bytes read: the reader reads headers, not payloads."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.count = 0

    def read(self, n: int | None = -1, /) -> bytes:
        out = super().read(n)
        self.count += len(out)
        return out


def test_the_reader_skips_payloads() -> None:
    big = fatbinkit.elf_so({".nv_fatbin": fatbinkit.container(fatbinkit.entry("sass", "9.0", bytes(8 << 20)))})
    f = _Counting(big)
    assert [str(a) for a in read_kernels(f, len(big), "big.so").sass] == ["9.0"]
    assert f.count < 64 << 10


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=8), st.integers(0, 2000))
def test_mutated_files_give_kernels_or_a_clear_error(flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(fatbinkit.cuda_so(("8.0", "9.0a"), ("10.0f",)))
    for at, value in flips:
        data[at % len(data)] = value
    data = data[: len(data) - cut % len(data)]
    try:
        _read(bytes(data), "fuzz.so")
    except BinaryError as e:
        assert str(e).startswith("fuzz.so: ")
