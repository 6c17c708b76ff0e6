"""The watch of Kueue's Workloads that TrainingJobs own, while Kueue's Workload API is served.

Kueue is optional: where ``workloads.kueue.x-k8s.io`` (``v1beta2``) is not served the operator runs as without it,
asks discovery again every ``recheck_seconds``, and starts watching once Kueue is installed (and stops when it is
removed). Until the first list is read the pass gets no view (None), as where Kueue is absent: a placed job is
never taken down for a Workload not read yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from types import TracebackType

from gputopo.control.kueue_quota import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    WORKLOAD_PLURAL,
    KueueView,
    WorkloadFacts,
    workload_facts,
)
from gputopo.kube.client import KubeClient, workload_path
from gputopo.kube.errors import ApiError
from gputopo.kube.reflector import Reflector, Rhythm

__all__ = ["RECHECK_SECONDS", "KueueWatch"]

logger = logging.getLogger("gputopo.controller")

RECHECK_SECONDS = 30.0  # how often discovery is asked whether Kueue's Workload API is served (or still is)


class KueueWatch:
    def __init__(
        self,
        client: KubeClient,
        poke: Callable[[], None],
        *,
        page_size: int = 100,
        recheck_seconds: float = RECHECK_SECONDS,
    ) -> None:
        self.client, self.poke = client, poke
        self.recheck_seconds = recheck_seconds
        self._rhythm = Rhythm(page_size=page_size)
        self.reflector: Reflector[WorkloadFacts] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._recheck: asyncio.Task[None] | None = None
        self._served: bool | None = None

    def view(self) -> KueueView | None:
        """The TrainingJobs' Workloads by owner uid; None while Kueue's Workload API is not served or not listed."""
        reflector = self.reflector
        if reflector is None or not reflector.synced.is_set():
            return None
        by_owner: dict[str, list[WorkloadFacts]] = {}
        for facts in reflector.items.values():
            by_owner.setdefault(facts.owner_uid, []).append(facts)
        return KueueView({uid: tuple(sorted(ws, key=lambda w: w.name)) for uid, ws in by_owner.items()})

    async def discover(self) -> None:
        """Ask whether the Workload API is served; start or stop the watch accordingly. An error leaves it as it was."""
        try:
            served = await self.client.serves(KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL)
        except ApiError as exc:
            logger.warning("Kueue Workloads: discovery failed; asking again later: %s", exc)
            return
        if served and self.reflector is None:
            logger.info("Kueue Workloads (%s/%s) are served: watching them", KUEUE_GROUP, KUEUE_VERSION)
            self.reflector = Reflector(
                self.client,
                "Workloads",
                workload_path(None),
                lambda _, obj, __: workload_facts(obj),
                on_change=self.poke,
                namespaced=True,
                rhythm=self._rhythm,
            )
            self._watching = asyncio.create_task(self.reflector.run(), name="watch Workloads")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reflector.synced.wait(), timeout=self.recheck_seconds)
            self.poke()
        elif not served and self.reflector is not None:
            logger.info("Kueue Workloads are no longer served: not watching them")
            await self._stop()
            self.poke()
        elif not served and self._served is None:
            logger.info(
                "Kueue Workloads are not served: jobs in a Kueue queue wait (asked again every %.0fs)",
                self.recheck_seconds,
            )
        self._served = served

    async def _stop(self) -> None:
        task, self._watching, self.reflector = self._watching, None, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _rechecks(self) -> None:
        while True:
            await asyncio.sleep(self.recheck_seconds)
            await self.discover()

    async def __aenter__(self) -> KueueWatch:
        await self.discover()
        self._recheck = asyncio.create_task(self._rechecks(), name="discover Workloads")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            await asyncio.gather(self._recheck, return_exceptions=True)
            self._recheck = None
        await self._stop()
