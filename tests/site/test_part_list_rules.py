"""A part list is parsed strictly (lockbuild.site.partlist.parse_part_list): 1 to MAX_PARTS parts, each size
a plain non-negative number of bytes, and sizes that add up to the listed file's size."""

from __future__ import annotations

import pytest

from lockbuild.errors import IntegrityError
from lockbuild.site.partlist import MAX_PARTS, parse_part_list

HEX = "0" * 64


def listing(sizes: list[str], total: int) -> bytes:
    parts = "".join(f'[[parts]]\nname = "p{i:03}"\nsize = {s}\nsha256 = "{HEX}"\n' for i, s in enumerate(sizes))
    parts = parts or "parts = []\n"
    return f'format = 1\nfile = "x.lbz"\nsize = {total}\nsha256 = "{HEX}"\n{parts}'.encode()


def test_a_well_formed_list_is_read() -> None:
    got = parse_part_list(listing(["1", "2"], 3), "list")
    assert [p.size for p in got.parts] == [1, 2] and got.size == 3


@pytest.mark.parametrize("count", [0, MAX_PARTS + 1])
def test_a_list_of_no_parts_or_too_many_is_refused(count: int) -> None:
    with pytest.raises(IntegrityError, match=f"lists {count} parts; expected 1 to {MAX_PARTS}"):
        parse_part_list(listing(["0"] * count, 0), "list")


@pytest.mark.parametrize("size", ["-1", "true", '"1"', "1.0"])
def test_a_part_size_that_is_not_a_number_of_bytes_is_refused(size: str) -> None:
    with pytest.raises(IntegrityError, match=r"parts\[0\] size is not a number of bytes"):
        parse_part_list(listing([size], 1), "list")


def test_parts_that_do_not_add_up_to_the_file_are_refused() -> None:
    with pytest.raises(IntegrityError, match="the parts add up to 3 bytes; the list says 4"):
        parse_part_list(listing(["1", "2"], 4), "list")
