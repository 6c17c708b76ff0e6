"""Reports held while gangs' writes go out: one timed poke for them, however many passes hold them."""

from __future__ import annotations

import asyncio
from typing import cast

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobKey
from gputopo.control.reconcile import Pass
from gputopo.controller.client import KubeClient
from gputopo.controller.metrics import Metrics
from gputopo.controller.runtime import Runtime
from gputopo.controller.settings import OperatorSettings
from gputopo.placement import place


def runtime() -> Runtime:
    # No API client: a held report writes nothing, and that is what these tests hold.
    return Runtime(OperatorSettings(), cast(KubeClient, object()), place, metrics=Metrics())


def test_passes_that_hold_a_report_share_one_timed_poke() -> None:
    async def main() -> None:
        rt = runtime()
        rt.placing = 1  # a gang's writes are going out
        report = JobActions(JobKey(("ml", "small")), "uid", status=TrainingJobStatus())
        rt.apply(Pass(actions=[report]), {})
        first = rt.report_timer
        for _ in range(20):
            rt.apply(Pass(actions=[report]), {})
        assert list(rt.reports_held) == [report.job]
        assert first is not None and rt.report_timer is first and not first.cancelled()
        await rt.drain()
        assert first.cancelled()

    asyncio.run(main())


def test_an_earlier_due_report_replaces_the_later_poke_and_the_poke_wakes_the_loop() -> None:
    async def main() -> None:
        rt = runtime()
        rt._poke_when_reports_due(30.0)
        later = rt.report_timer
        rt._poke_when_reports_due(0.01)
        assert later is not None and later.cancelled() and rt.report_timer is not later
        await asyncio.wait_for(rt.wake.wait(), timeout=2.0)

    asyncio.run(main())
