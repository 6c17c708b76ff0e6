"""The watch of Kueue's Workloads: no view while Kueue's API is not served (or not listed yet), the TrainingJobs'
Workloads by owner once it is, and none again once it is no longer served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from gputopo.controller.kueuewatch import KueueWatch
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError


def workload(name: str, owner_kind: str = "TrainingJob") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "gputopo.io/v1alpha1",
                    "kind": owner_kind,
                    "name": "llm",
                    "uid": "u1",
                    "controller": True,
                }
            ],
        }
    }


class FakeApi:
    """Serves Kueue's Workloads while ``served``: one list of ``items``, then a watch that waits forever."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.served = False
        self.fail_discovery = False

    async def serves(self, group: str, version: str, plural: str) -> bool:
        assert (group, version, plural) == ("kueue.x-k8s.io", "v1beta2", "workloads")
        if self.fail_discovery:
            raise ApiError("discover: 503 ServiceUnavailable", 503)
        return self.served

    async def get(self, what: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        assert path == "/apis/kueue.x-k8s.io/v1beta2/workloads"
        return {"items": self.items, "metadata": {"resourceVersion": "1"}}

    async def watch(self, what: str, path: str, params: dict[str, str], *, read_timeout: float) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield {}


def test_workloads_are_watched_only_while_kueue_serves_them() -> None:
    api = FakeApi([workload("trainingjob-llm-1"), workload("job-other-1", owner_kind="Job")])
    pokes: list[int] = []

    async def go() -> None:
        async with KueueWatch(cast(KubeClient, api), lambda: pokes.append(1), recheck_seconds=3600) as kueue:
            assert kueue.view() is None  # not installed: the pass runs without Kueue
            api.served = True
            await kueue.discover()
            view = kueue.view()
            assert view is not None and [w.name for w in view.of("u1")] == ["trainingjob-llm-1"]
            assert pokes  # news for a pass
            api.fail_discovery = True  # an error asking is no answer: what is watched stays watched
            await kueue.discover()
            assert kueue.view() is not None
            api.fail_discovery, api.served = False, False
            await kueue.discover()
            assert kueue.view() is None

    asyncio.run(asyncio.wait_for(go(), 5))
