"""Per node, new gangs' pods go out in the order the gangs were planned (devicePlugin mode)."""

from __future__ import annotations

import asyncio

from gputopo.controller.turns import NodeTurns, Turn


def test_a_gang_waits_for_those_planned_before_it_on_its_nodes_only() -> None:
    async def main() -> list[str]:
        turns, order = NodeTurns(), []
        first = turns.take(["n1"])
        elsewhere = turns.take(["n2"])
        second = turns.take(["n1", "n2"])  # after both

        async def out(name: str, turn: Turn, delay: float) -> None:
            await asyncio.sleep(delay)
            await turn.wait(timeout=5)
            order.append(name)
            turn.release()

        await asyncio.gather(out("second", second, 0), out("elsewhere", elsewhere, 0.02), out("first", first, 0.05))
        return order

    assert asyncio.run(main()) == ["elsewhere", "first", "second"]


def test_a_turn_whose_predecessor_never_goes_waits_only_its_timeout() -> None:
    async def main() -> float:
        turns = NodeTurns()
        turns.take(["n1"])  # never released
        late = turns.take(["n1"])
        loop = asyncio.get_running_loop()
        started = loop.time()
        await late.wait(timeout=0.05)
        return loop.time() - started

    assert asyncio.run(main()) < 1.0


def test_released_turns_are_forgotten() -> None:
    async def main() -> int:
        turns = NodeTurns()
        turns.take(["n1", "n2"]).release()
        alone = turns.take(["n3"])
        assert alone.before == ()
        return len(turns)

    assert asyncio.run(main()) == 1
