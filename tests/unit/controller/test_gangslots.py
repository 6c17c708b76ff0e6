"""Shared slots: up to ``per_slot`` gangs' writes of one priority share a slot of the priority gate, which keeps
its order; a slot goes back once its writers are done, and a cancelled writer never keeps one."""

from __future__ import annotations

import asyncio

import pytest

from gputopo.controller.gangslots import SharedSlots
from gputopo.controller.gate import PriorityGate


async def _writers(slots: SharedSlots, count: int, priority: int = 0) -> tuple[int, int]:
    """``count`` writers at once; the most of them inside at a time, and the gate's slots then taken."""
    inside = most = 0
    gate_most = 0
    gate = slots.gate

    async def one() -> None:
        nonlocal inside, most, gate_most
        async with slots.slot(priority):
            inside += 1
            most = max(most, inside)
            gate_most = max(gate_most, gate._holding[priority])
            await asyncio.sleep(0.001)
            inside -= 1

    await asyncio.gather(*(one() for _ in range(count)))
    return most, gate_most


def test_up_to_per_slot_writers_share_each_slot_of_the_gate() -> None:
    async def main() -> tuple[int, int, int]:
        gate = PriorityGate(2)
        most, gate_most = await _writers(SharedSlots(gate, 4), 40)
        return most, gate_most, gate._free

    assert asyncio.run(main()) == (8, 2, 2)  # two slots, four writers each; every slot back at the end


def test_the_gates_order_holds_for_shared_slots() -> None:
    async def main() -> list[str]:
        gate, order = PriorityGate(1), []
        slots = SharedSlots(gate, 4)
        await gate.acquire(1)  # the one slot is held while the writers queue

        async def one(name: str, priority: int) -> None:
            async with slots.slot(priority):
                order.append(name)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(one(n, p)) for n, p in [("event", 2), ("update", 1), ("gang-a", 0), ("gang-b", 0)]]
        for _ in range(3):
            await asyncio.sleep(0)
        assert gate.waiting == 3  # one slot wanted per priority: the two gangs share theirs
        gate.release(1)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["gang-a", "gang-b", "update", "event"]  # both gangs in the first slot


class CountingGate(PriorityGate):
    """A priority gate that counts the slots it hands out."""

    def __init__(self, slots: int) -> None:
        super().__init__(slots)
        self.taken = 0

    async def acquire(self, priority: int) -> None:
        self.taken += 1
        await super().acquire(priority)


def test_a_slot_takes_no_more_than_per_slot_writers_over_its_life() -> None:
    async def main() -> tuple[int, int]:
        gate = CountingGate(2)
        slots = SharedSlots(gate, 2)
        async with slots.slot(0):  # stays inside while others come and go
            async with slots.slot(0):  # the second writer of the first slot: it takes no one else in
                pass
            async with slots.slot(0):
                in_two = gate.taken
        async with slots.slot(0):
            pass
        return in_two, gate.taken

    # The third writer needs a slot of its own though the first is still held; once all left, a new one.
    assert asyncio.run(main()) == (2, 3)


def test_cancelled_writers_leave_no_slot_taken() -> None:
    async def main() -> int:
        gate = PriorityGate(1)
        slots = SharedSlots(gate, 4)
        await gate.acquire(0)

        async def wait() -> None:
            async with slots.slot(1):
                raise AssertionError("never let in")

        waiting = [asyncio.create_task(wait()) for _ in range(3)]
        await asyncio.sleep(0)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        gate.release(0)
        await asyncio.sleep(0)
        async with slots.slot(0):
            return gate._free

    assert asyncio.run(main()) == 0  # the one slot is free for the next writer, who holds it


def test_a_slot_is_shared_by_at_least_one_writer() -> None:
    with pytest.raises(ValueError, match="at least one"):
        SharedSlots(PriorityGate(1), 0)
