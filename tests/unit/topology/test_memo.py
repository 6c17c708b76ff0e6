"""The pure core's one cache design: typed tables per owner, and the bounded table shared across owners."""

from __future__ import annotations

import pytest

from gputopo.topology.memo import Memo, SharedTable, Table

SIZES: Table[str, int] = Table("sizes")
NAMES: Table[int, str] = Table("names")


def test_each_table_is_its_own_dict_and_stays_with_its_memo() -> None:
    memo = Memo()
    memo.table(SIZES)["a"] = 1
    memo.table(NAMES)[1] = "a"
    assert memo.table(SIZES) == {"a": 1}
    assert memo.table(NAMES) == {1: "a"}
    assert Memo().table(SIZES) == {}


@pytest.mark.parametrize(
    ("limit", "keys", "kept", "builds"),
    [
        (2, ["a", "b", "c"], ["b", "c"], 3),
        (2, ["a", "b", "a", "c"], ["a", "c"], 3),
        (3, ["a", "a", "a"], ["a"], 1),
    ],
    ids=["oldest-out", "a-hit-keeps-an-entry", "one-build-per-key"],
)
def test_shared_table_is_bounded_least_recently_used_out_first(
    limit: int, keys: list[str], kept: list[str], builds: int
) -> None:
    table: SharedTable[str, str] = SharedTable(limit)
    built: list[str] = []

    def build(key: str) -> str:
        built.append(key)
        return key.upper()

    for key in keys:
        table.get_or_build(key, lambda key=key: build(key))  # type: ignore[misc]
    assert len(built) == builds
    assert [table.get_or_build(key, lambda: "rebuilt") for key in kept] == [key.upper() for key in kept]


def test_shared_table_clear_forgets_every_entry() -> None:
    table: SharedTable[str, int] = SharedTable(4)
    table.get_or_build("a", lambda: 1)
    table.clear()
    assert table.get_or_build("a", lambda: 2) == 2
