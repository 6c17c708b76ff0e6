"""The writer over a recording client: a gang that waits for its node turn gives its API slot to the gangs behind
it, and still writes its status before, and its pods after, the turn; a job's new Kueue Workload goes out beside
its status, not after it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, JobKey
from gputopo.control.statuscache import StatusCache
from gputopo.controller.metrics import Metrics
from gputopo.controller.turns import NodeTurns, Turn
from gputopo.controller.writer import JOB_CONCURRENCY_SHARE, Priority, Writer
from gputopo.kube.client import KubeClient


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.status_answered = asyncio.Event()
        self.status_answered.set()

    async def write_status(self, namespace: str, name: str, status: TrainingJobStatus) -> str:
        self.calls.append(("status", name))
        await self.status_answered.wait()
        self.calls.append(("status answered", name))
        return "2"

    async def create_workload(self, body: dict[str, Any]) -> bool:
        self.calls.append(("workload", body["metadata"]["name"]))
        await asyncio.sleep(0)
        return True

    async def create_pod(self, body: dict[str, Any]) -> bool:
        self.calls.append(("pod", body["metadata"]["name"]))
        await asyncio.sleep(0)
        return True


def _job(name: str) -> tuple[JobActions, JobFacts]:
    key = JobKey(("ml", name))
    actions = JobActions(key, f"uid-{name}", status=TrainingJobStatus(), pods=[{"metadata": {"name": f"{name}-0"}}])
    facts = JobFacts("ml", name, f"uid-{name}", 1, None, "1", None, TrainingJobStatus())
    return actions, facts


def _writer(client: RecordingClient) -> Writer:
    return Writer(cast(KubeClient, client), StatusCache(), Metrics(), api_concurrency=JOB_CONCURRENCY_SHARE)  # 1 slot


def test_a_gang_waiting_for_its_node_turn_lets_the_next_gang_write_meanwhile() -> None:
    async def main() -> list[tuple[str, str]]:
        client, turns = RecordingClient(), NodeTurns()
        writer = _writer(client)
        earlier = turns.take(["n1"])  # a gang planned before on n1, its pods not bound yet
        waiting, elsewhere = turns.take(["n1"]), turns.take(["n2"])
        (a, a_job), (b, b_job) = _job("a"), _job("b")
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(writer.write(a, a_job, Priority.PLACEMENT, waiting, loop.time()))
        second = asyncio.create_task(writer.write(b, b_job, Priority.PLACEMENT, elsewhere, loop.time()))
        await asyncio.wait_for(second, 1.0)  # through the one slot while "a" waits for its turn
        assert not first.done()
        earlier.release()
        await asyncio.wait_for(first, 1.0)
        return client.calls

    assert [c for c in asyncio.run(main()) if c[0] != "status answered"] == [
        ("status", "a"),
        ("status", "b"),
        ("pod", "b-0"),
        ("pod", "a-0"),
    ]


def test_a_gang_whose_turn_is_due_writes_in_one_go() -> None:
    async def main() -> list[tuple[str, str]]:
        client = RecordingClient()
        writer = _writer(client)
        turn: Turn = NodeTurns().take(["n1"])
        assert turn.due
        (a, a_job) = _job("a")
        await writer.write(a, a_job, Priority.PLACEMENT, turn, asyncio.get_running_loop().time())
        return client.calls

    assert asyncio.run(main()) == [("status", "a"), ("status answered", "a"), ("pod", "a-0")]


def test_a_new_workload_goes_out_while_the_status_write_is_still_on_its_way() -> None:
    async def main() -> list[tuple[str, str]]:
        client = RecordingClient()
        client.status_answered.clear()  # the API server is slow to answer the status
        writer = _writer(client)
        actions, facts = _job("a")
        actions.pods = []
        actions.workload = {"metadata": {"name": "trainingjob-a-1"}}
        task = asyncio.create_task(writer.write(actions, facts, Priority.PLACEMENT, None, 0.0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert ("workload", "trainingjob-a-1") in client.calls, "the Workload waited for the status's answer"
        client.status_answered.set()
        await asyncio.wait_for(task, 1.0)
        return client.calls

    assert asyncio.run(main()) == [("status", "a"), ("workload", "trainingjob-a-1"), ("status answered", "a")]
