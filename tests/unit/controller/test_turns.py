"""Per node, new gangs' pods go out in the order the gangs were planned (devicePlugin mode)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import gputopo.controller.runtime as runtime_module
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobKey, PodFacts
from gputopo.controller.metrics import Metrics
from gputopo.controller.runtime import Runtime
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.turns import NodeTurns, Turn
from gputopo.kube.client import KubeClient
from gputopo.placement import place


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


# -- the runtime gives a gang's turn up once the watch shows its pods bound ------------------------------------


def _placed(rt: Any, names: list[str]) -> tuple[Turn, Turn]:
    """A gang planned on n1 whose pods ``names`` went out, and the gang planned after it there."""
    first, second = rt.turns.take(["n1"]), rt.turns.take(["n1"])
    actions = JobActions(JobKey(("ml", "first")), "uid", pods=[{"metadata": {"name": n}} for n in names])
    rt._after_turn(actions, first, 1)
    return first, second


def _pod(name: str, node: str, generation: int = 1) -> PodFacts:
    return PodFacts("ml", name, node=node, job="first", generation=generation)


def test_a_turn_is_given_up_when_every_pod_of_the_gang_is_seen_bound() -> None:
    async def main() -> None:
        rt = Runtime(OperatorSettings(), cast(KubeClient, object()), place, metrics=Metrics())
        first, second = _placed(rt, ["first-0", "first-1"])
        rt.pod_indexed(_pod("first-0", ""))  # created, not bound
        rt.pod_indexed(_pod("first-1", "n1", generation=0))  # the previous pod of that name
        rt.pod_indexed(_pod("first-0", "n1"))
        assert not first.mine.is_set(), "first-1 is not bound yet"
        rt.pod_indexed(_pod("first-1", "n2"))
        assert first.mine.is_set() and not rt.memory.bindings()
        await asyncio.wait_for(second.wait(), 0.1)

    asyncio.run(main())


def test_a_turn_whose_pods_are_never_seen_bound_is_given_up_after_the_turn_time(monkeypatch: Any) -> None:
    monkeypatch.setattr(runtime_module, "NODE_TURN_SECONDS", 0.05)

    async def main() -> None:
        rt = Runtime(OperatorSettings(), cast(KubeClient, object()), place, metrics=Metrics())
        first, _ = _placed(rt, ["first-0"])
        assert not first.mine.is_set()
        await asyncio.sleep(0.1)
        assert first.mine.is_set() and not rt.memory.bindings()
        nothing_out, _ = _placed(rt, [])
        assert nothing_out.mine.is_set(), "no pod went out: nothing to wait for"

    asyncio.run(main())
