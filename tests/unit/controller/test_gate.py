"""The priority gate: slots go to the lowest priority number, then to the earliest arrival."""

from __future__ import annotations

import asyncio

import pytest

from gputopo.controller.gate import PriorityGate


async def _hold_then_queue(gate: PriorityGate, wanted: list[tuple[str, int]]) -> list[str]:
    order: list[str] = []
    await gate.acquire(0)  # the only slot is held while everyone queues

    async def one(name: str, priority: int) -> None:
        async with gate.slot(priority):
            order.append(name)
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(one(name, priority)) for name, priority in wanted]
    await asyncio.sleep(0)
    assert gate.waiting == len(wanted)
    gate.release(0)
    await asyncio.gather(*tasks)
    return order


def test_lower_priority_numbers_go_first_and_arrivals_keep_their_order() -> None:
    wanted = [("event", 2), ("update-a", 1), ("gang-a", 0), ("update-b", 1), ("gang-b", 0)]
    order = asyncio.run(_hold_then_queue(PriorityGate(1), wanted))
    assert order == ["gang-a", "gang-b", "update-a", "update-b", "event"]


def test_no_more_holders_than_slots() -> None:
    async def main() -> int:
        gate, holding, most = PriorityGate(3), 0, 0

        async def one(i: int) -> None:
            nonlocal holding, most
            async with gate.slot(0):
                holding += 1
                most = max(most, holding)
                await asyncio.sleep(0.001)
                holding -= 1

        await asyncio.gather(*(one(i) for i in range(40)))
        return most

    assert asyncio.run(main()) == 3


def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    async def main() -> list[str]:
        gate, order = PriorityGate(1), []
        await gate.acquire(0)

        async def one(name: str, priority: int) -> None:
            async with gate.slot(priority):
                order.append(name)

        first = asyncio.create_task(one("cancelled", 0))
        second = asyncio.create_task(one("next", 1))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        gate.release(0)
        await second
        with pytest.raises(asyncio.CancelledError):
            await first
        # The slot is free again: one more can take it at once.
        await asyncio.wait_for(gate.acquire(5), timeout=1)
        return order

    assert asyncio.run(main()) == ["next"]


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        PriorityGate(0)


def test_the_less_urgent_wait_while_the_more_urgent_hold_slots_even_with_slots_free() -> None:
    async def main() -> list[str]:
        gate, order = PriorityGate(4, patience=60.0), []
        await gate.acquire(0)  # a gang's writes are going out; three slots are free
        update = asyncio.create_task(gate.acquire(1))
        await asyncio.sleep(0.01)
        order.append("update in" if update.done() else "update waits")
        gate.release(0)
        await asyncio.wait_for(update, timeout=1)
        order.append("update in")
        return order

    assert asyncio.run(main()) == ["update waits", "update in"]


def test_a_more_urgent_arrival_takes_a_free_slot_at_once_past_less_urgent_waiters() -> None:
    """An Event waits while a status write holds a slot; a gang's placement arriving then finds slots free and
    nobody more urgent: it goes in now, not when the status write is through."""

    async def main() -> tuple[bool, bool]:
        gate = PriorityGate(4, patience=60.0)
        await gate.acquire(1)  # held throughout
        event = asyncio.create_task(gate.acquire(2))
        await asyncio.sleep(0)
        placement = asyncio.create_task(gate.acquire(0))
        await asyncio.sleep(0.01)
        seen = placement.done(), event.done()
        placement.cancel()  # without the slot taken, the Event stays behind the waiting placement
        gate.release(1)
        if placement.done() and not placement.cancelled():
            gate.release(0)
        await asyncio.wait_for(event, timeout=1)  # let in once the more urgent are through
        return seen

    assert asyncio.run(main()) == (True, False)


def test_a_waiter_out_of_patience_gets_the_next_free_slot() -> None:
    async def main() -> bool:
        gate = PriorityGate(2, patience=0.05)
        await gate.acquire(0)  # held throughout: the event would wait for good without patience
        event = asyncio.create_task(gate.acquire(2))
        await asyncio.wait_for(event, timeout=2)
        return event.done()

    assert asyncio.run(main())
