"""The quiet window: while gangs' writes go out and nothing is queued, news that cannot change a plan runs a
pass at most every ``QUIET_PASS_SECONDS``; news that can runs one at once."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime
from typing import cast

from gputopo.control.facts import job_facts
from gputopo.control.view import ClusterView
from gputopo.controller.metrics import Metrics
from gputopo.controller.runtime import QUIET_PASS_SECONDS, Runtime, World
from gputopo.controller.settings import OperatorSettings
from gputopo.kube.client import KubeClient
from gputopo.placement import place


def runtime() -> Runtime:
    settings = OperatorSettings(settle_seconds=0, resync_seconds=30)
    return Runtime(settings, cast(KubeClient, object()), place, metrics=Metrics())


def counting(rt: Runtime, idle: bool) -> list[float]:
    """Replace the pass by one that only notes when it ran; ``idle``: it had nothing to place."""
    ran: list[float] = []

    async def run_once(world: World, now: datetime | None = None) -> datetime | None:
        ran.append(time.monotonic())
        rt.quiet_since = time.monotonic() if idle else None
        return None

    rt.run_once = run_once  # type: ignore[method-assign]
    return ran


def world() -> World:
    return World({}, {}, ClusterView({}, {}, ()))


async def loop_for(rt: Runtime, seconds: float, pokes: list[tuple[float, bool]]) -> None:
    """Run the loop for ``seconds``, poking at the given times (urgent or not)."""
    loop = asyncio.get_running_loop()
    for at, urgent in pokes:
        loop.call_later(at, rt.poke, urgent)
    stop = loop.time() + seconds
    loop.call_later(seconds, rt.poke)  # wakes the loop to see that it is stopped
    await rt.run(world, lambda: loop.time() >= stop)


def test_while_gangs_go_out_news_that_cannot_change_a_plan_waits_out_the_window() -> None:
    async def main() -> None:
        rt = runtime()
        ran = counting(rt, idle=True)
        rt.placing = 3
        rt.poke()  # the first pass
        start = time.monotonic()
        await loop_for(rt, 1.3, [(0.05 * i, False) for i in range(1, 21)])
        gaps = [b - a for a, b in itertools.pairwise(ran)]
        assert 2 <= len(ran) <= 4, f"{len(ran)} passes for 20 pokes in {time.monotonic() - start:.1f} s"
        assert all(gap >= QUIET_PASS_SECONDS - 0.02 for gap in gaps), gaps

    asyncio.run(main())


def test_foreign_gangs_new_plans_going_out_open_the_window_too() -> None:
    async def main() -> None:
        rt = runtime()
        assert rt.gangs is not None
        ran = counting(rt, idle=True)
        rt.gangs.placing = 2
        rt.poke()
        await loop_for(rt, 0.45, [(0.1, False), (0.2, False), (0.3, False)])
        assert len(ran) == 2 and ran[1] - ran[0] > 0.4  # the three pokes waited; the loop's last poke is urgent
        rt.gangs.placing = 0
        ran.clear()
        rt.poke()
        await loop_for(rt, 0.45, [(0.1, False), (0.2, False), (0.3, False)])
        assert len(ran) == 4

    asyncio.run(main())


def test_urgent_news_runs_a_pass_at_once_even_inside_the_window() -> None:
    async def main() -> None:
        rt = runtime()
        ran = counting(rt, idle=True)
        rt.placing = 3
        rt.poke()
        await loop_for(rt, 0.4, [(0.1, True)])
        assert len(ran) == 2 and ran[1] - ran[0] < 0.25

    asyncio.run(main())


def test_without_gangs_going_out_or_after_a_pass_that_placed_there_is_no_window() -> None:
    async def main() -> None:
        for placing, idle in ((0, True), (3, False)):
            rt = runtime()
            ran = counting(rt, idle=idle)
            rt.placing = placing
            rt.poke()
            await loop_for(rt, 0.45, [(0.1, False), (0.2, False), (0.3, False)])
            assert len(ran) == 4, (placing, idle, len(ran))

    asyncio.run(main())


def test_a_job_new_or_changed_is_urgent_and_its_status_is_not() -> None:
    def event(generation: int, phase: str) -> None:
        meta = {"name": "j1", "namespace": "ml", "uid": "u1", "generation": generation}
        spec = {"workers": 1, "gpusPerWorker": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
        rt.job_indexed(job_facts({"metadata": meta, "spec": spec, "status": {"phase": phase}}))

    rt = runtime()
    for generation, phase, urgent in [(1, "Pending", True), (1, "Running", False), (2, "Running", True)]:
        rt.wake.clear()
        rt.urgent.clear()
        event(generation, phase)
        assert rt.wake.is_set() and rt.urgent.is_set() is urgent, (generation, phase)
