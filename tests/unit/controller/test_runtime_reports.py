"""Reports held while gangs' writes go out: one timed poke for them, however many passes hold them; and how long
gangs wait for an API slot."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobKey, job_facts
from gputopo.control.ledger import PlannedGang
from gputopo.control.reconcile import PassResult
from gputopo.controller.metrics import Metrics
from gputopo.controller.runtime import Runtime
from gputopo.controller.settings import OperatorSettings
from gputopo.kube.client import KubeClient
from gputopo.placement import place


def runtime() -> Runtime:
    # No API client: a held report writes nothing, and that is what these tests hold.
    return Runtime(OperatorSettings(), cast(KubeClient, object()), place, metrics=Metrics())


def test_passes_that_hold_a_report_share_one_timed_poke() -> None:
    async def main() -> None:
        rt = runtime()
        rt.placing = 1  # a gang's writes are going out
        report = JobActions(JobKey(("ml", "small")), "uid", status=TrainingJobStatus())
        rt.apply(PassResult(actions=[report]), {})
        first = rt.report_timer
        for _ in range(20):
            rt.apply(PassResult(actions=[report]), {})
        assert list(rt.memory.reports_held()) == [report.job]
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


class _Writes:
    """Takes gangs' status and pod writes; a status write takes 50 ms."""

    def __init__(self) -> None:
        self.pods: list[str] = []

    async def write_status(self, namespace: str, name: str, status: TrainingJobStatus) -> str:
        await asyncio.sleep(0.05)
        return "1"

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.pods.append(body["metadata"]["name"])


def test_a_gang_s_wait_for_an_api_slot_is_measured() -> None:
    """One API slot (concurrency 4 / share 4): the second gang waits for the first one's writes."""

    async def main() -> None:
        client = _Writes()
        rt = Runtime(OperatorSettings(api_concurrency=4), cast(KubeClient, client), place, metrics=Metrics())
        for name in ("first", "second"):
            meta = {"name": name, "namespace": "ml", "uid": name, "generation": 1}
            spec = {"workers": 1, "gpusPerWorker": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
            job = job_facts({"metadata": meta, "spec": spec})
            actions = JobActions(job.key, name, status=TrainingJobStatus(), pods=[{"metadata": {"name": f"{name}-0"}}])
            rt._start(actions, job, PlannedGang(job.key, 1, (("n1", (0,)),)))
        await asyncio.gather(*rt.writing.values())
        samples = rt.metrics.registry
        assert samples.get_sample_value("gputopo_gang_slot_wait_seconds_count") == 2
        waited = samples.get_sample_value("gputopo_gang_slot_wait_seconds_sum") or 0.0
        assert 0.04 <= waited < 0.5, waited
        assert client.pods == ["first-0", "second-0"]

    asyncio.run(main())
