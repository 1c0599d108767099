"""Which adapter a named bundle source gets, images included, is decided in one place
(lockbuild/site/sources.py): no command tests for an image itself before calling it."""

from __future__ import annotations

import ast
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent
# The image test (image/record.py::is_image, the squashfs magic): the one place that picks an adapter
# calls it, and the image package lists a folder of images with it.
IMAGE_TEST_CALLERS = {"site/sources.py", "image/record.py"}


def _tests_for_images(path: Path) -> list[str]:
    """Where ``path`` names the image test or the squashfs magic (imports inside functions count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [f"imports {a.name} (line {node.lineno})" for a in node.names if a.name in ("is_image", "MAGIC")]
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name == "is_image":
                found.append(f"names is_image (line {node.lineno})")
        elif isinstance(node, ast.Constant) and node.value in (b"hsqs", "hsqs"):
            found.append(f"reads the squashfs magic (line {node.lineno})")
    return found


def _offenders() -> dict[str, list[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in IMAGE_TEST_CALLERS and (hits := _tests_for_images(path)):
            out[rel] = hits
    return out


def test_only_named_source_tells_an_image_from_a_bundle() -> None:
    """verify and sign take a bundle or an image: the commands call site.sources (named_source,
    signed_file) and act on the adapter it picked; a command that tests for an image itself would be a
    second place deciding what a named thing is."""
    assert _offenders() == {}, "tell an image from a bundle through lockbuild.site.sources"
    assert _tests_for_images(PACKAGE / "site" / "sources.py")


def test_the_structural_test_sees_a_planted_image_check(tmp_path: Path) -> None:
    planted = tmp_path / "verify.py"
    planted.write_text(
        "from pathlib import Path\n\ndef verify(b: str) -> None:\n"
        "    from lockbuild.image.record import is_image\n\n    if is_image(Path(b)):\n        pass\n"
    )
    assert len(_tests_for_images(planted)) == 2
    planted.write_text("def f(p):\n    return open(p, 'rb').read(4) == b'hsqs'\n")
    assert _tests_for_images(planted) == ["reads the squashfs magic (line 2)"]
