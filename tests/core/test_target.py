"""The node's platform and wheel-tag priority: which wheels a node can install, and which it prefers."""

from __future__ import annotations

import pytest

from lockbuild.target import Platform, Target, parse_platform


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x86_64-manylinux_2_28", Platform("x86_64", "glibc", (2, 28))),
        ("aarch64-manylinux_2_17", Platform("aarch64", "glibc", (2, 17))),
        ("x86_64-manylinux_2_40", Platform("x86_64", "glibc", (2, 40))),
        ("x86_64-manylinux2014", Platform("x86_64", "glibc", (2, 17))),
        ("aarch64-manylinux2014", Platform("aarch64", "glibc", (2, 17))),
        ("x86_64-unknown-linux-gnu", Platform("x86_64", "glibc", (2, 28))),
        ("aarch64-unknown-linux-gnu", Platform("aarch64", "glibc", (2, 28))),
        ("x86_64-unknown-linux-musl", Platform("x86_64", "musl", (1, 2))),
        ("aarch64-unknown-linux-musl", Platform("aarch64", "musl", (1, 2))),
    ],
)
def test_platforms_uv_accepts_are_read(text: str, expected: Platform) -> None:
    assert parse_platform(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "linux",
        "x86_64",
        "i686-manylinux_2_28",
        "x86_64-manylinux_2_5",  # older than manylinux2014: uv has no such target
        "x86_64-manylinux_2_29",  # uv accepts 17, 28 and 31-40 only
        "x86_64-manylinux_2_41",
        "x86_64-musllinux_1_2",  # uv spells musl as unknown-linux-musl
        "x86_64-apple-darwin",
        "x86_64-pc-windows-msvc",
        "x86_64-manylinux_2_28 ",
    ],
)
def test_unknown_platforms_are_refused_naming_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="expected a platform of the form") as info:
        parse_platform(text)
    assert "x86_64-manylinux_2_28" in str(info.value)
    assert repr(text) in str(info.value)


def test_a_huge_platform_is_shown_cut_short() -> None:
    with pytest.raises(ValueError) as info:
        parse_platform("x86_64-" + "m" * 10_000)
    assert len(str(info.value)) < 500


def test_glibc_tags_run_from_the_newest_down_to_the_oldest_with_legacy_aliases() -> None:
    tags = Target.of("3.12", "x86_64-manylinux_2_28").parsed.platform_tags()
    assert tags[0] == "manylinux_2_28_x86_64"
    assert tags.index("manylinux_2_17_x86_64") + 1 == tags.index("manylinux2014_x86_64")
    assert tags[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    assert "manylinux_2_29_x86_64" not in tags
    assert all(t.endswith("_x86_64") for t in tags)


def test_aarch64_manylinux_starts_at_2_17() -> None:
    assert Target.of("3.12", "aarch64-manylinux2014").parsed.platform_tags() == [
        "manylinux_2_17_aarch64",
        "manylinux2014_aarch64",
    ]
    tags = Target.of("3.12", "aarch64-manylinux_2_28").parsed.platform_tags()
    assert tags[0] == "manylinux_2_28_aarch64" and tags[-1] == "manylinux2014_aarch64"


def test_musl_tags_are_musllinux_only() -> None:
    tags = Target.of("3.12", "x86_64-unknown-linux-musl").parsed.platform_tags()
    assert tags[:2] == ["musllinux_1_2_x86_64", "musllinux_1_1_x86_64"]
    assert not [t for t in tags if "manylinux" in t]


X86 = Target.of("3.11", "x86_64-manylinux_2_28")


def test_a_binary_wheel_for_the_node_beats_a_pure_one() -> None:
    native = X86.wheel_rank("a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    abi3 = X86.wheel_rank("a-1-cp39-abi3-manylinux_2_17_x86_64.whl")
    pure = X86.wheel_rank("a-1-py3-none-any.whl")
    assert native is not None and abi3 is not None and pure is not None
    assert native < abi3 < pure


def test_a_newer_glibc_tag_ranks_before_an_older_one() -> None:
    newer = X86.wheel_rank("a-1-cp311-cp311-manylinux_2_28_x86_64.whl")
    older = X86.wheel_rank("a-1-cp311-cp311-manylinux_2_17_x86_64.whl")
    assert newer is not None and older is not None and newer < older


@pytest.mark.parametrize(
    "filename",
    [
        "a-1-cp311-cp311-manylinux_2_34_x86_64.whl",  # needs a newer glibc than the node has
        "a-1-cp312-cp312-manylinux_2_17_x86_64.whl",  # another Python
        "a-1-cp311-cp311-manylinux_2_17_aarch64.whl",  # another architecture
        "a-1-cp311-cp311-musllinux_1_2_x86_64.whl",  # another C library
        "a-1-cp311-cp311-linux_x86_64.whl",  # not a portable tag
        "a-1-cp311-cp311-macosx_11_0_x86_64.whl",
        "not-a-wheel.whl",
    ],
)
def test_wheels_the_node_cannot_install_have_no_rank(filename: str) -> None:
    assert X86.wheel_rank(filename) is None


def test_musl_nodes_take_musllinux_wheels_and_not_manylinux_ones() -> None:
    musl = Target.of("3.12", "aarch64-unknown-linux-musl")
    assert musl.wheel_rank("a-1-cp312-cp312-musllinux_1_2_aarch64.whl") is not None
    assert musl.wheel_rank("a-1-cp312-cp312-manylinux_2_17_aarch64.whl") is None
    assert musl.wheel_rank("a-1-py3-none-any.whl") is not None


def test_marker_environment_describes_the_node_not_the_builder() -> None:
    env = Target.of("3.10", "aarch64-manylinux_2_28").marker_environment()
    assert env["python_version"] == "3.10"
    assert env["platform_machine"] == "aarch64"
    assert env["sys_platform"] == "linux"
