"""The node chooses its build: the pure rule (choice/ranking.py::choose), the facts it rests on,
the signed manifest fields (format 3), and the choosing forms of `install` and `doctor --store`.

Each rule has a test that fails without it: the example of the issue (CUDA 13 = capability 7.5+, driver
580+; CUDA 12.9 = capability 6.0-8.9, driver 575+) on an A100 with 580, a V100, an H100 with 575; no GPU;
two GPUs of different capability; a build that serves a newer version; a store and a folder; CPU builds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys
from hostile import INSTALL
from servers import FakeServer
from sitekit import AS_OF, files_for, make_bundle, sha

from lockbuild.bundle import manifest as manifest_mod
from lockbuild.bundle import manifestparse
from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.bundle.manifest import Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.choice.candidates import Option
from lockbuild.choice.ranking import choose
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RecipeError
from lockbuild.install.node import FactsError, Gpu, Node, detect
from lockbuild.install.nodecheck import Facts, Needs
from lockbuild.recipe import parse_recipe

CU13 = GpuNeeds((7, 5), "580")
CU129 = GpuNeeds((6, 0), "575", (8, 9))
A100 = Gpu("NVIDIA A100-SXM4-80GB", (8, 0))
V100 = Gpu("Tesla V100-SXM2-32GB", (7, 0))
H100 = Gpu("NVIDIA H100 80GB HBM3", (9, 0))
P100 = Gpu("Tesla P100-PCIE-16GB", (6, 0))


def node(driver: str | None, *gpus: Gpu) -> Node:
    return Node("x86_64", "glibc", (2, 36), driver, gpus)


def facts(n: Node) -> Facts:
    return Facts(n, frozenset({"3.12"}), 1 << 50)


def opt(variant: str, gpu: GpuNeeds | None, version: str = "0.11.0", serves: Sequence[str] = ()) -> Option:
    return Option("vllm", version, variant, Needs("3.12", "x86_64-manylinux_2_28", gpu, 0), tuple(serves))


VLLM = [opt("cu130", CU13), opt("cu129", CU129)]


def by_build(choice: object) -> dict[str, dict[str, object]]:
    return {c["build"]: c for c in choice.to_json()["candidates"]}  # type: ignore[attr-defined]


# --- the example -------------------------------------------------------------------------


def test_an_a100_with_driver_580_gets_cuda_13() -> None:
    got = choose("vllm", "0.11.0", VLLM, facts(node("580.65.06", A100)))
    assert got.chosen is not None and got.chosen.build == "vllm/0.11.0-cu130"
    other = by_build(got)["vllm/0.11.0-cu129"]
    assert other["fits"] is True and "a newer CUDA" in other["reasons"][0]  # type: ignore[index]
    assert by_build(got)["vllm/0.11.0-cu130"] == {
        "build": "vllm/0.11.0-cu130",
        "fits": True,
        "serves": None,
        "reasons": [],
    }


def test_a_v100_gets_cuda_12_9() -> None:
    got = choose("vllm", "0.11.0", VLLM, facts(node("580.65.06", V100)))
    assert got.chosen is not None and got.chosen.build == "vllm/0.11.0-cu129"
    assert "needs compute capability 7.5+" in by_build(got)["vllm/0.11.0-cu130"]["reasons"][0]  # type: ignore[index]


def test_an_h100_with_driver_575_gets_nothing_and_both_reasons() -> None:
    got = choose("vllm", "0.11.0", VLLM, facts(node("575.51.03", H100)))
    assert got.chosen is None
    c = by_build(got)
    assert c["vllm/0.11.0-cu130"]["reasons"] == ["needs driver 580+, the node has 575.51.03"]
    assert c["vllm/0.11.0-cu129"]["fits"] is False
    assert "up to compute capability 8.9 only (no sm_90)" in c["vllm/0.11.0-cu129"]["reasons"][0]  # type: ignore[index]
    assert "install NVIDIA driver 580 or newer" in got.fix and "9.0" in got.fix
    assert got.to_json()["chosen"] is None


# --- the order of preference ---------------------------------------------------------------------


def test_the_narrowest_capability_range_breaks_a_driver_tie() -> None:
    wide, narrow = opt("wide", GpuNeeds((7, 0), "575", (9, 0))), opt("narrow", GpuNeeds((8, 0), "575", (8, 9)))
    got = choose("vllm", "0.11.0", [wide, narrow], facts(node("580", A100)))
    assert got.chosen == narrow
    assert "wider" in by_build(got)["vllm/0.11.0-wide"]["reasons"][0]  # type: ignore[index]


def test_the_recipe_order_breaks_a_full_tie() -> None:
    a, b = opt("a", GpuNeeds((8, 0), "575")), opt("b", GpuNeeds((8, 0), "575"))
    assert choose("vllm", "0.11.0", [b, a], facts(node("580", A100))).chosen == b
    assert choose("vllm", "0.11.0", [a, b], facts(node("580", A100))).chosen == a


def test_every_gpu_of_the_node_must_fit() -> None:
    mixed = node("580.65.06", A100, H100)
    got = choose("vllm", "0.11.0", VLLM, facts(mixed))
    assert got.chosen is not None and got.chosen.build == "vllm/0.11.0-cu130"
    # with driver 575 CUDA 13 is out, and CUDA 12.9 covers the A100 but not the H100: nothing
    got = choose("vllm", "0.11.0", VLLM, facts(node("575", A100, H100)))
    assert got.chosen is None
    assert "NVIDIA H100 80GB HBM3 (9.0)" in by_build(got)["vllm/0.11.0-cu129"]["reasons"][0]  # type: ignore[index]
    low = choose("vllm", "0.11.0", VLLM, facts(node("580", V100, A100)))  # the V100 rules CUDA 13 out
    assert low.chosen is not None and low.chosen.variant == "cu129"


def test_an_older_version_serves_a_node_no_build_of_the_asked_one_fits() -> None:
    old = opt("cu126", GpuNeeds((6, 0), "560", (8, 9)), version="0.10.2", serves=["0.11.0"])
    got = choose("vllm", "0.11.0", [*VLLM, old], facts(node("570.86", P100)))
    assert got.chosen == old and "serves 0.11.0" in got.why
    assert by_build(got)["vllm/0.10.2-cu126"]["serves"] == "0.11.0"
    # where a build of the asked version fits, it wins over one that only serves it, even a narrower one
    narrow = opt("cu130x", GpuNeeds((8, 0), "580", (8, 0)), version="0.10.2", serves=["0.11.0"])
    got = choose("vllm", "0.11.0", [*VLLM, narrow], facts(node("580", A100)))
    assert got.chosen is not None and got.chosen.build == "vllm/0.11.0-cu130"
    assert "only serves 0.11.0" in by_build(got)["vllm/0.10.2-cu130x"]["reasons"][0]  # type: ignore[index]
    # a build that serves nothing asked is no candidate
    assert "vllm/0.10.2-cu126" not in by_build(
        choose("vllm", "0.11.0", [*VLLM, dataclasses.replace(old, serves=())], facts(node("570.86", P100)))
    )


def test_without_a_version_the_newest_version_with_a_fitting_build() -> None:
    old = opt("cu126", GpuNeeds((6, 0), "560", (8, 9)), version="0.10.2")
    got = choose("vllm", None, [*VLLM, old], facts(node("580", A100)))
    assert got.chosen is not None and got.chosen.build == "vllm/0.11.0-cu130"
    assert "an older version" in by_build(got)["vllm/0.10.2-cu126"]["reasons"][0]  # type: ignore[index]
    got = choose("vllm", None, [*VLLM, old], facts(node("570", P100)))
    assert got.chosen == old


# --- CPU builds ----------------------------------------------------------------------------------


def test_a_node_without_a_gpu_takes_a_cpu_build_or_is_refused_clearly() -> None:
    cpu = opt("cpu", None)
    got = choose("vllm", "0.11.0", [*VLLM, cpu], facts(node(None)))
    assert got.chosen == cpu
    assert by_build(got)["vllm/0.11.0-cu130"]["reasons"][0].startswith("needs an NVIDIA GPU")  # type: ignore[index]
    none = choose("vllm", "0.11.0", VLLM, facts(node(None)))
    assert none.chosen is None and "CPU variant" in none.fix


def test_a_gpu_node_never_silently_gets_the_cpu_build_of_a_gpu_engine() -> None:
    cpu = opt("cpu", None)
    h100 = facts(node("575", H100))
    got = choose("vllm", "0.11.0", [*VLLM, cpu], h100)
    assert got.chosen is None and "--allow-cpu" in got.fix
    assert "--allow-cpu" in by_build(got)["vllm/0.11.0-cpu"]["reasons"][0]  # type: ignore[index]
    assert choose("vllm", "0.11.0", [*VLLM, cpu], h100, allow_cpu=True).chosen == cpu
    # --allow-cpu still prefers a GPU build that fits
    a100 = choose("vllm", "0.11.0", [cpu, *VLLM], facts(node("580", A100)), allow_cpu=True)
    assert a100.chosen is not None and a100.chosen.variant == "cu130"
    # a CPU-only engine: its CPU build is what a GPU node takes
    assert choose("vllm", "0.11.0", [cpu], h100).chosen == cpu


# --- facts -------------------------------------------------------------------------------------


@pytest.fixture
def no_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("LOCKBUILD_GPU_FACTS", raising=False)


def test_without_nvidia_smi_the_driver_comes_from_sys_then_proc(tmp_path: Path, no_smi: None) -> None:
    sys_v, proc_v = tmp_path / "sys-version", tmp_path / "proc-version"
    proc_v.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 1 2025\n")
    assert detect(proc_driver=proc_v, sys_driver=tmp_path / "absent").driver == "570.86.15"
    sys_v.write_text("580.65.06\n")
    n = detect(proc_driver=proc_v, sys_driver=sys_v)
    assert n.driver == "580.65.06" and n.gpus == () and n.stated is None
    # capabilities unknown: a build with a capability rule does not fit
    got = choose("vllm", "0.11.0", VLLM, facts(n))
    assert got.chosen is None
    assert any("GPUs are unknown" in r for r in by_build(got)["vllm/0.11.0-cu130"]["reasons"])  # type: ignore[attr-defined]


def test_stated_facts_are_used_strictly_and_marked(tmp_path: Path, no_smi: None) -> None:
    f = tmp_path / "facts.json"
    f.write_text(json.dumps({"driver": "580.65.06", "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}]}))
    n = detect(environ={"LOCKBUILD_GPU_FACTS": str(f)})
    assert n.driver == "580.65.06" and n.gpus == (A100,) and n.stated == str(f)
    for bad in (
        {"driver": "580", "gpus": [{"name": "x", "capability": "eight"}]},
        {"driver": 580},
        {"gpus": [{"name": "x", "capability": "8.0"}]},
        {"driver": "580", "extra": 1},
        [],
    ):
        f.write_text(json.dumps(bad))
        with pytest.raises(FactsError):
            detect(environ={"LOCKBUILD_GPU_FACTS": str(f)})
    with pytest.raises(FactsError, match="found none"):
        detect(environ={"LOCKBUILD_GPU_FACTS": str(tmp_path / "absent.json")})


def smi_script(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A fake nvidia-smi on PATH running ``body`` (sh)."""
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LOCKBUILD_GPU_FACTS", raising=False)


def test_a_gpu_name_that_is_not_utf_8_is_decoded_with_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One byte that is not UTF-8 in a GPU name: the facts are read (with U+FFFD), never an internal error."""
    smi_script(tmp_path / "bin", monkeypatch, r"printf '580.65.06, 8.0, NVIDIA A100 \377\n'")
    n = detect()
    assert n.driver == "580.65.06" and n.gpus == (Gpu("NVIDIA A100 \ufffd", (8, 0)),)
    code, data, err = run("doctor", "--root", tmp_path / "e", "--catalogue", tmp_path, "--trust", tmp_path)
    assert code == 0 and data["node"]["gpus"] == [{"name": "NVIDIA A100 \ufffd", "capability": "8.0"}], err


@pytest.mark.parametrize(
    "line",
    [
        r"580.65.06, 8.0, NVIDIA \033]0;owned\007A100",  # an escape sequence in the name
        r"580.65.06, 8.0, NVIDIA \342\200\256A100",  # a bidirectional override
        r"580.65.06; rm -rf, 8.0, NVIDIA A100",  # not a driver version
        r"580.65.06, [N/A], NVIDIA A100",  # a GPU whose capability is unknown is never left out
        r"580.65.06, 8.0, " + "A" * 129,
    ],
)
def test_nvidia_smi_output_is_held_to_the_rules_of_stated_facts(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi_script(tmp_path / "bin", monkeypatch, f"printf '{line}\\n'")
    with pytest.raises(FactsError, match=r"for a GPU; expected DRIVER, X\.Y, NAME"):
        detect()
    r = CliRunner().invoke(main, ["doctor", "--root", str(tmp_path / "e"), "--catalogue", str(tmp_path)])
    assert r.exit_code == 1 and "ERROR " in r.stderr and "internal" not in r.stderr, r.stderr
    assert "\x1b" not in r.stderr and "\u202e" not in r.stderr  # what it printed is shown escaped


def test_two_drivers_or_too_many_gpus_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi_script(tmp_path / "bin", monkeypatch, "echo '580.65.06, 8.0, A'; echo '535.10, 8.0, B'")
    with pytest.raises(FactsError, match="one driver"):
        detect()
    smi_script(tmp_path / "bin", monkeypatch, 'for i in $(seq 65); do echo "580.65.06, 8.0, GPU $i"; done')
    with pytest.raises(FactsError, match="lists 65 GPUs; expected at most 64"):
        detect()


def test_nvidia_smi_output_is_read_bounded_and_the_tool_killed_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An nvidia-smi that prints megabytes, then holds its output open: stopped at the bound, at once."""
    import time

    smi_script(tmp_path / "bin", monkeypatch, "head -c 3000000 /dev/zero | tr '\\0' a; sleep 60")
    started = time.monotonic()
    with pytest.raises(FactsError, match="printed over 65536 bytes"):
        detect()
    assert time.monotonic() - started < 20


# --- the recipe and the signed manifest ------------------------------------------------------------


RECIPE = TOY_RECIPE.replace('gpu-probe = "torch"', 'gpu-probe = "none"')


def test_the_recipe_reads_max_capability_and_serves() -> None:
    text = RECIPE + 'gpu = { min-capability = "6.0", max-capability = "8.9", min-driver = "575" }\nserves = ["1.1"]\n'
    b = parse_recipe(text).builds[0]
    assert b.gpu is not None and b.gpu.max_capability == (8, 9) and b.serves == ("1.1",)
    with pytest.raises(RecipeError) as exc:
        parse_recipe(RECIPE + 'gpu = { min-capability = "8.0", max-capability = "7.0" }\nserves = ["0.9"]\n')
    assert any("max-capability" in p for p in exc.value.problems)
    assert any("serves" in p and "newer" in p for p in exc.value.problems)


def _manifest(install: object) -> manifest_mod.Manifest:
    from hostile import manifest

    files = files_for("1.0")
    members = tuple(Member(p, len(d), sha(d), k, "") for p, d, k in files)
    return manifest(members, install=install)


def test_format_3_only_with_the_new_fields_and_read_strictly() -> None:
    plain = _manifest(dataclasses.replace(INSTALL, gpu=GpuNeeds((7, 5), "580")))
    assert plain.to_toml().startswith(b"format = 2\n")  # bundles without the new fields stay byte-identical
    assert b"variant-properties" not in plain.to_toml()
    new = _manifest(dataclasses.replace(INSTALL, gpu=CU129, serves=("0.11.0",)))
    raw = new.to_toml()
    assert raw.startswith(b"format = 3\n")
    assert b'"nvidia :: cuda_version_lower_bound :: 12.9"' in raw and b'"nvidia :: sm_arch :: 89_real"' in raw
    assert b"sm_arch :: 90_real" not in raw and b"sm_arch :: 60_real" in raw
    back = parse_manifest(raw)
    assert back.install.gpu == CU129 and back.install.serves == ("0.11.0",) and back.to_toml() == raw
    for bad in (
        raw.replace(b"format = 3", b"format = 2"),
        plain.to_toml().replace(b"format = 2", b"format = 3"),
        raw.replace(b"89_real", b"90_real"),
        raw.replace(b'max-capability = "8.9"', b'max-capability = "5.0"'),
    ):
        with pytest.raises(IntegrityError):
            parse_manifest(bad)


def test_an_older_lockbuild_refuses_format_3_naming_the_version_that_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    new = dataclasses.replace(_manifest(dataclasses.replace(INSTALL, gpu=CU129)), lockbuild_version="0.2.0")
    raw = new.to_toml()
    monkeypatch.setattr(manifestparse, "READS", (2,))  # as lockbuild 0.1.0 reads: format 2 only
    with pytest.raises(IntegrityError) as exc:
        parse_manifest(raw)
    assert "format 3 (made by lockbuild 0.2.0)" in exc.value.message and "0.2.0" in (exc.value.tip or "")


# --- the choosing forms: a store, a folder, doctor --store ------------------------------------------


def fake_gpu(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, *lines: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LOCKBUILD_GPU_FACTS", raising=False)


def signed(
    out: Path,
    keys: Keys,
    variant: str,
    gpu: GpuNeeds | None,
    version: str = "1.0",
    serves: tuple[str, ...] = (),
    *,
    platform: str = PLATFORM,
    serial_days: int = 0,
    engine: str = "toyengine",
    sign: bool = True,
) -> Path:
    """A signed in-memory bundle (no uv) whose signed manifest carries ``gpu`` and ``serves``."""
    import sitekit

    install = dataclasses.replace(INSTALL, gpu=gpu, serves=serves)
    real = sitekit.hostile_manifest

    def with_install(members: object, **changes: object) -> manifest_mod.Manifest:
        return real(
            members,
            **changes,
            install=install,
            python=PY,
            platform=platform,  # type: ignore[arg-type]
            engine=engine,
        )

    sitekit.hostile_manifest = with_install  # type: ignore[assignment]
    try:
        return make_bundle(
            out, [keys.secret] if sign else [], version=version, variant=variant, serial_days=serial_days
        )
    finally:
        sitekit.hostile_manifest = real


def run(*args: str | Path) -> tuple[int, dict[str, object], str]:
    r = CliRunner().invoke(main, [*map(str, args), "--json"])
    lines = r.stdout.strip().splitlines()
    try:
        data = json.loads(r.stdout)
    except ValueError:
        data = json.loads(lines[-1]) if lines else {}
    return r.exit_code, data, r.stderr


@pytest.fixture
def store(tmp_path: Path, keys: Keys) -> Path:
    dist, s = tmp_path / "dist", tmp_path / "store"
    for variant, gpu in (("cu130", CU13), ("cu129", CU129)):
        code, _, err = run("import", signed(dist, keys, variant, gpu), "--trust", keys.trust, "--store", s)
        assert code == 0, err
    code, _, err = run(
        "import",
        signed(dist, keys, "cu126", GpuNeeds((6, 0), "560", (8, 9)), "0.9", ("1.0",)),
        "--trust",
        keys.trust,
        "--store",
        s,
    )
    assert code == 0, err
    return s


def test_install_from_a_store_refuses_with_every_candidate_and_places_nothing(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(tmp_path / "bin", monkeypatch, "575.51.03, 9.0, NVIDIA H100 80GB HBM3")
    root = tmp_path / "engines"
    code, data, err = run("install", "toyengine/1.0", "--store", store, "--root", root, "--trust", keys.trust)
    assert code == 1 and data["ok"] is False and data["chosen"] is None
    cands = {c["build"]: c for c in data["candidates"]}  # type: ignore[attr-defined]
    assert set(cands) == {"toyengine/1.0-cu130", "toyengine/1.0-cu129", "toyengine/0.9-cu126"}
    assert cands["toyengine/0.9-cu126"]["serves"] == "1.0"
    assert cands["toyengine/1.0-cu130"]["reasons"] == ["needs driver 580+, the node has 575.51.03"]
    assert "TIP Install NVIDIA driver 580 or newer" in err
    assert not (root / "toyengine").exists() or not any((root / "toyengine").glob("1.0-*"))
    # the plain text: every candidate with its reasons, and the fix
    r = CliRunner().invoke(
        main, ["install", "toyengine", "--store", str(store), "--root", str(root), "--trust", str(keys.trust)]
    )
    assert r.exit_code == 1 and "toyengine/1.0-cu129: does not fit" in r.stderr and "TIP Install NVIDIA" in r.stderr


def test_an_untrusted_candidate_is_never_chosen(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import make_keys

    other = make_keys(tmp_path / "other", "other")
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    code, data, _ = run("install", "toyengine/1.0", "--store", store, "--root", tmp_path / "e", "--trust", other.trust)
    assert code == 1 and data["chosen"] is None
    assert all("signatures are refused" in c["reasons"][0] for c in data["candidates"])  # type: ignore[attr-defined]


def test_doctor_store_shows_the_build_each_version_would_take(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    code, data, err = run(
        "doctor", "--store", store, "--root", tmp_path / "e", "--trust", keys.trust, "--catalogue", tmp_path
    )
    assert code == 0, err
    entries = {(e["engine"], e["version"]): e for e in data["store"]["entries"]}  # type: ignore[index]
    assert entries[("toyengine", "1.0")]["chosen"] == "toyengine/1.0-cu130"
    assert entries[("toyengine", "0.9")]["chosen"] == "toyengine/0.9-cu126"
    assert {c["build"] for c in entries[("toyengine", "1.0")]["candidates"]} == {
        "toyengine/1.0-cu130",
        "toyengine/1.0-cu129",
        "toyengine/0.9-cu126",
    }
    r = CliRunner().invoke(
        main,
        [
            "doctor",
            "--store",
            str(store),
            "--root",
            str(tmp_path / "e"),
            "--trust",
            str(keys.trust),
            "--catalogue",
            str(tmp_path),
        ],
    )
    assert "store       toyengine 1.0: takes toyengine/1.0-cu130" in r.stdout


def test_stated_facts_are_marked_in_the_output(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "facts.json"
    f.write_text(json.dumps({"driver": "575.51.03", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}]}))
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")  # detected, but not used
    monkeypatch.setenv("LOCKBUILD_GPU_FACTS", str(f))
    code, data, err = run("install", "toyengine/1.0", "--store", store, "--root", tmp_path / "e", "--trust", keys.trust)
    assert code == 1 and data["chosen"] is None and "(stated in" in err
    assert data["node"]["facts"] == "stated" and data["node"]["facts_file"] == str(f)  # type: ignore[index]
    f.write_text(json.dumps({"driver": "575.51.03", "gpus": [{"name": "Tesla V100-SXM2-32GB", "capability": "7.0"}]}))
    code, data, _ = run(
        "doctor", "--store", store, "--root", tmp_path / "e", "--trust", keys.trust, "--catalogue", tmp_path
    )
    assert data["node"]["facts"] == "stated"  # type: ignore[index]
    entry = next(e for e in data["store"]["entries"] if e["version"] == "1.0")  # type: ignore[index]
    assert entry["chosen"] == "toyengine/1.0-cu129"  # the stated V100, not the detected H100


# --- a folder another user can write: what is planted there -----------------------------------------


AS_OF_SERIAL = int(AS_OF.timestamp())


def test_an_older_signed_build_planted_under_a_name_that_sorts_first_is_passed_over(
    keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same engine, version and variant, signed, for manylinux_2_17 (its name sorts before 2_28) and a
    year older: the newest signed build wins the tie, and the older one is named as passed over."""
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    usb = tmp_path / "usb"
    new = signed(usb, keys, "cu130", CU13, serial_days=365)
    old = signed(usb, keys, "cu130", CU13, platform="x86_64-manylinux_2_17")
    assert sorted(p.name for p in usb.glob("*.lbz")) == [old.name, new.name]
    # the choice is said before the install runs (which then fails: these in-memory bundles hold no uv)
    r = CliRunner().invoke(main, ["install", f"{usb}/", "--root", str(tmp_path / "e"), "--trust", str(keys.trust)])
    assert "\nchose toyengine/1.0-cu130: " in "\n" + r.stderr and f"(from {new.name})\n" in r.stderr, r.stderr
    assert (
        f"  toyengine/1.0-cu130 ({old.name}): fits, passed over: an older signed build (serial "
        f"{AS_OF_SERIAL}); toyengine/1.0-cu130 ({new.name}) is newer (serial {AS_OF_SERIAL + 365 * 86400})" in r.stderr
    ), r.stderr
    # the same rule in the pure choice, with the older one first in the order
    a100 = facts(node("580.65.06", A100))
    older = dataclasses.replace(opt("cu130", CU13), newness=(100, 100), source="a.lbz")
    newer = dataclasses.replace(opt("cu130", CU13), newness=(200, 50), source="b.lbz")
    later = dataclasses.replace(opt("cu130", CU13), newness=(200, 90), source="c.lbz")
    assert choose("vllm", "0.11.0", [older, newer], a100).chosen is newer
    assert choose("vllm", "0.11.0", [older, newer, later], a100).chosen is later  # same serial: the build time
    cpu_old = dataclasses.replace(opt("cpu", None), newness=(1, 1), source="a.lbz")
    cpu_new = dataclasses.replace(opt("cpu", None), newness=(2, 1), source="b.lbz")
    got = choose("vllm", "0.11.0", [cpu_old, cpu_new], facts(node(None)))
    assert got.chosen is cpu_new and "an older signed build" in got.lines()[1]


def test_an_unsigned_file_claiming_another_engine_counts_for_nothing(
    keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unsigned .lbz (a real bundle of another engine, no .minisig) and one with a garbage .minisig: the
    folder's choice is made from the signed bundles alone, and the planted files are named by file name."""
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    usb = tmp_path / "usb"
    good = signed(usb, keys, "cu130", CU13)
    signed(usb, keys, "evil", None, "9.9", engine="otherengine", sign=False)  # claims another engine, unsigned
    from conftest import make_keys

    stranger = make_keys(tmp_path / "stranger", "stranger")
    signed(usb, stranger, "evil", None, "9.8", engine="thirdengine")  # signed, by a key the node does not trust
    (usb / "garbage.lbz").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(100))
    (usb / "garbage.lbz.minisig").write_text("untrusted comment: x\nnot base64\n")
    import lockbuild.bundle.read as read_mod

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the head of a bundle whose signatures were not met was read")

    monkeypatch.setattr(read_mod, "read_head", never)
    r = CliRunner().invoke(main, ["install", f"{usb}/", "--root", str(tmp_path / "e"), "--trust", str(keys.trust)])
    assert "several engines" not in r.stderr and "\nchose toyengine/1.0-cu130: " in "\n" + r.stderr, r.stderr
    assert f"(from {good.name})" in r.stderr and "was read" not in r.stderr
    skipped = [line for line in r.stderr.splitlines() if line.startswith("  skipped ")]
    assert [line.split(":")[0] for line in skipped] == [
        "  skipped garbage.lbz",
        "  skipped otherengine-9.9-evil-x86_64-manylinux_2_28.lbz",
        "  skipped thirdengine-9.8-evil-x86_64-manylinux_2_28.lbz",
    ], r.stderr
    assert all(": not judged: its signatures are refused (" in line for line in skipped)
    assert not any(" 9.9" in line or "otherengine/" in line for line in r.stderr.splitlines()[:2])
    # nothing signed at all: refused, with every file and its reason
    good.unlink()
    code, _, err = run("install", f"{usb}/", "--root", tmp_path / "e", "--trust", keys.trust)
    assert code == 1 and "holds no bundle to choose from" in err and "skipped garbage.lbz: not judged" in err


def test_planted_file_names_reach_the_terminal_escaped_on_every_path(
    keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """File names with an escape sequence and with a line feed (faking a line of the choice): escaped in the
    choice said before an install, in the refusal, and on stderr under --json."""
    usb = tmp_path / "usb"
    good = signed(usb, keys, "cu130", CU13)
    (usb / "\x1b]0;owned\x07\x1b[2J.lbz").write_bytes(b"x")
    (usb / "z\nchose otherengine 6.6: forged.lbz").write_bytes(b"x")

    def clean(text: str) -> None:
        assert "\x1b" not in text and "\x07" not in text, text
        assert not any(line.startswith("chose otherengine") for line in text.splitlines()), text

    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    r = CliRunner().invoke(main, ["install", f"{usb}/", "--root", str(tmp_path / "e"), "--trust", str(keys.trust)])
    assert f"(from {good.name})" in r.stderr and "skipped \\x1b]0;owned" in r.stderr, r.stderr
    assert "skipped z\\x0achose otherengine 6.6" in r.stderr, r.stderr
    clean(r.stderr)
    fake_gpu(tmp_path / "bin", monkeypatch, "535.10, 8.0, NVIDIA A100-SXM4-80GB")  # nothing fits: the refusal
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(
            main, ["install", f"{usb}/", "--root", str(tmp_path / "e"), "--trust", str(keys.trust), *extra]
        )
        assert r.exit_code == 1 and "ERROR no build of toyengine fits" in r.stderr, r.stderr
        clean(r.stderr)
        clean(r.stdout)
    good.unlink()  # nothing signed: the refusal names every file, each on the ERROR line
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(
            main, ["install", f"{usb}/", "--root", str(tmp_path / "e"), "--trust", str(keys.trust), *extra]
        )
        assert r.exit_code == 1 and "holds no bundle to choose from" in r.stderr, r.stderr
        clean(r.stderr)


def test_doctor_shows_a_planted_catalogue_file_name_on_one_line(tmp_path: Path, no_smi: None) -> None:
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "x\nlockbuild   all is well \x1b[32mOK.lbz").write_bytes(b"not a bundle")
    r = CliRunner().invoke(main, ["doctor", "--root", str(tmp_path / "e"), "--catalogue", str(cat)])
    assert "catalogue   PROBLEM: x\\x0alockbuild   all is well \\x1b[32mOK.lbz: " in r.stdout, r.stdout
    assert not any(line.startswith("lockbuild   all is well") for line in r.stdout.splitlines())


# --- real bundles: the chosen build is installed, from a store and from a folder -------------------


GPU_RECIPE = RECIPE.replace('variant = "cpu"', 'variant = "cu130"') + (
    'gpu = { min-capability = "7.5", min-driver = "580" }\n\n[[builds]]\n'
    + RECIPE.split("[[builds]]\n", 1)[1].replace('variant = "cpu"', 'variant = "cu129"')
    + 'gpu = { min-capability = "6.0", max-capability = "8.9", min-driver = "575" }\n'
)


@pytest.fixture(scope="module")
def real(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The toy engine 1.0 built (with uv, from the local index) as cu130 and cu129, in one folder."""
    tmp = tmp_path_factory.mktemp("choose-real")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        recipe = tmp / "toy.toml"
        recipe.write_text(GPU_RECIPE)
        r = CliRunner().invoke(
            main, ["build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / "usb"), "--json"]
        )
        assert r.exit_code == 0, r.stderr
    yield tmp / "usb"


def test_a_folder_and_a_store_install_the_chosen_build(
    real: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(list(real.glob("*.lbz"))) == 2
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 7.0, Tesla V100-SXM2-32GB")
    root = tmp_path / "engines"
    code, data, err = run("install", f"{real}/", "--root", root, "--trust", keys.trust)
    assert code == 0, err
    assert data["chosen"] == "toyengine/1.0-cu129" and data["status"] == "installed"
    assert (root / "toyengine" / "1.0-cu129" / "bin" / "toyengine").exists()
    assert not (root / "toyengine" / "1.0-cu130").exists()
    store = tmp_path / "store"
    for lbz in real.glob("*.lbz"):
        assert run("import", lbz, "--trust", keys.trust, "--store", store)[0] == 0
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 8.0, NVIDIA A100-SXM4-80GB")
    r = CliRunner().invoke(
        main, ["install", "toyengine/1.0", "--store", str(store), "--root", str(root), "--trust", str(keys.trust)]
    )
    assert r.exit_code == 0, r.stderr
    assert "\nchose toyengine/1.0-cu130: a build of 1.0" in "\n" + r.stderr
    assert "installed: toyengine 1.0-cu130" in r.stdout
    # an explicit ENGINE/VERSION-VARIANT still means exactly that one
    code, data, err = run("install", "toyengine/1.0-cu129", "--store", store, "--root", root, "--trust", keys.trust)
    assert code == 0 and "chosen" not in data, err


def test_which_arguments_choose(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockbuild.site.sources import Choosing, choosing_form

    monkeypatch.chdir(tmp_path)
    (tmp_path / "toyengine").mkdir()  # a directory named like the engine: with --store, the name is the engine
    assert choosing_form("toyengine", store=store) == Choosing("toyengine", None, store=store)
    assert choosing_form("toyengine/1.0", store=store) == Choosing("toyengine", "1.0", store=store)
    assert choosing_form("toyengine/", store=store) == Choosing(None, None, folder=Path("toyengine/"))
    assert choosing_form("toyengine") == Choosing(None, None, folder=Path("toyengine"))  # no --store: the folder
    assert choosing_form("toyengine/1.0-cu129", store=store) is None  # in the store: exactly that build
    assert choosing_form("x.lbz", store=store) is None and choosing_form("toyengine/1.0") is None
    assert choosing_form("toyengine/1.0-cu999", store=store) is None  # no such build: named_source names it


def test_doctor_reads_a_catalogue_bundle_only_once_its_signatures_are_met(
    keys: Keys, tmp_path: Path, no_smi: None
) -> None:
    """doctor --catalogue lists a signed bundle's needs; an unsigned one claiming another engine, and one
    signed by a key the node does not trust, are problems named by file name, and nothing they claim shows."""
    cat = tmp_path / "cat"
    good = signed(cat, keys, "cpu", None)
    signed(cat, keys, "evil", None, "9.9", engine="otherengine", sign=False)
    from conftest import make_keys

    signed(cat, make_keys(tmp_path / "stranger", "stranger"), "evil", None, "9.8", engine="thirdengine")
    code, data, err = run("doctor", "--root", tmp_path / "e", "--catalogue", cat, "--trust", keys.trust)
    assert code == 0, err
    text = json.dumps(data)
    assert good.name in text and "otherengine" not in text.replace("otherengine-9.9", "")
    problems = [p for p in data["catalogue_problems"] if "not judged" in p]  # type: ignore[union-attr]
    assert sorted(p.split(":")[0] for p in problems) == [
        "otherengine-9.9-evil-x86_64-manylinux_2_28.lbz",
        "thirdengine-9.8-evil-x86_64-manylinux_2_28.lbz",
    ], data
    assert all("its signatures are refused" in p for p in problems)
    builds = json.dumps(data.get("catalogue"))
    assert "thirdengine" not in builds and "otherengine" not in builds and "toyengine" in builds
    # no trust directory: every bundle is named as not judged, and none of its claims is read
    code, data, _ = run("doctor", "--root", tmp_path / "e", "--catalogue", cat, "--trust", tmp_path / "none")
    assert "toyengine" not in json.dumps(data.get("catalogue"))
