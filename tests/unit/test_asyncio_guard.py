"""The guard that fails a unit test leaving asyncio tasks behind."""

from __future__ import annotations

import asyncio

import pytest
from asyncio_guard import run_listing_leftovers


async def _forgets_a_task() -> int:
    asyncio.get_running_loop().create_task(asyncio.Event().wait(), name="forgotten")
    return 1


async def _cancels_its_task() -> int:
    task = asyncio.get_running_loop().create_task(asyncio.Event().wait(), name="cancelled")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return 2


@pytest.mark.parametrize(
    ("main", "result", "left"),
    [(_forgets_a_task, 1, ["forgotten"]), (_cancels_its_task, 2, [])],
    ids=["a-forgotten-task-is-listed", "a-cancelled-task-is-not"],
)
def test_leftover_tasks_are_listed(main: object, result: int, left: list[str]) -> None:
    leftovers: list[str] = []
    assert run_listing_leftovers(main(), leftovers) == result  # type: ignore[operator]
    assert [name for name in left if any(f"name='{name}'" in line for line in leftovers)] == left
    assert len(leftovers) == len(left)


def test_the_unit_tests_run_asyncio_through_the_guard() -> None:
    assert asyncio.run.__qualname__ == "_no_asyncio_tasks_left_behind.<locals>.run"
