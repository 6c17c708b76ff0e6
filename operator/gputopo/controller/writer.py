"""Carries out one job's actions against the API server, in order, and says what became of them; decides nothing.

The status goes first (a new Kueue Workload beside it), then the deletions, then the gang: its ResourceClaims
before the pods that name them (in devicePlugin mode the pods wait for their node turn, and the gang gives its API
slot back while it waits), its Service beside them. What the outcome means (retry, back off, give the plan's GPUs
back) is ``control.memory``'s to say.

The jobs' writes share the API concurrency through a priority gate: at most ``JOB_CONCURRENCY_SHARE`` of its
worth of jobs at once, new gangs and new Kueue Workloads first in the order they were decided (so each gang goes to
kube-scheduler, and each Workload to Kueue, as soon as its own writes are done), then other jobs' writes, then
Events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from enum import IntEnum

from gputopo.control.actions import EventNote, JobActions
from gputopo.control.facts import JobFacts
from gputopo.control.memory import Written, refuses
from gputopo.control.statuscache import StatusCache
from gputopo.controller.gate import PriorityGate
from gputopo.controller.metrics import Metrics
from gputopo.controller.turns import Turn
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError

__all__ = ["JOB_CONCURRENCY_SHARE", "Priority", "Writer"]

logger = logging.getLogger("gputopo.controller")

# Jobs applied at once: the API concurrency divided by this (a gang's pods go out together within its job).
JOB_CONCURRENCY_SHARE = 4


class Priority(IntEnum):
    """Who gets a free API slot first."""

    PLACEMENT = 0  # a gang of this pass's placements (its status, Service, claims, pods), or a job's Kueue Workload
    UPDATE = 1  # any other job's writes: statuses, deletions
    EVENT = 2  # Events say what happened; nothing waits for them


class Writer:
    __slots__ = ("_gate", "api_concurrency", "client", "metrics", "statuses")

    def __init__(self, client: KubeClient, statuses: StatusCache, metrics: Metrics, api_concurrency: int) -> None:
        self.client, self.statuses, self.metrics = client, statuses, metrics
        self.api_concurrency = api_concurrency
        self._gate: PriorityGate | None = None  # made on first use, in the loop that uses it

    def _slots(self) -> PriorityGate:
        if self._gate is None:
            self._gate = PriorityGate(max(1, self.api_concurrency // JOB_CONCURRENCY_SHARE))
        return self._gate

    @property
    def gate(self) -> PriorityGate:
        """The gate the jobs' writes share, for other writes that share the API concurrency with them (gangs
        gputopo does not own: ``gangwriter.write_gang``)."""
        return self._slots()

    async def write(
        self, actions: JobActions, job: JobFacts, priority: Priority, turn: Turn | None, since: float
    ) -> Written:
        """The job's writes in order, once the gate lets them in (a gang's wait since ``since``, monotonic, is
        measured). With a ``turn`` (devicePlugin mode) the pods go out after those of the gangs planned before on
        their nodes."""
        gate = self._slots()
        async with gate.slot(priority):
            if priority is Priority.PLACEMENT and actions.workload is None:
                self.metrics.gang_slot_wait.observe(time.monotonic() - since)
            before = await self._before_gang(actions, job)
            if before is not None or turn is None or turn.due or not actions.pods:
                return before or await self._gang(actions, job, turn)
        # Waiting for the gangs planned before it on its nodes to be bound takes no API request: the slot goes to
        # the gangs behind it meanwhile (a node's small gangs, each waiting on the one before, would hold them all).
        await turn.wait()
        async with gate.slot(priority):
            return await self._gang(actions, job, None)

    async def _before_gang(self, actions: JobActions, job: JobFacts) -> Written | None:
        """The status, the Kueue Workload writes and the deletions; what became of them if they failed. A new
        Workload goes out beside the status: Kueue admits from it, the status only reports the wait."""
        namespace, _ = actions.job
        client = self.client
        try:
            status, _ = await asyncio.gather(self._status(actions, job), self._new_workload(actions))
            if status is not None:
                return status
            await self._workloads(actions)
            await asyncio.gather(
                *(client.delete_pod(namespace, d.name, d.grace_seconds) for d in actions.deletions),
                *(client.delete_claim(namespace, claim) for claim in actions.claim_deletions),
            )
        except ApiError as exc:
            self._failed(actions, exc)
            return Written(error=exc.reason or "unknown")
        return None

    async def _gang(self, actions: JobActions, job: JobFacts, turn: Turn | None) -> Written:
        """The gang's claims, pods and Service (after ``turn``, if one is given), then deleting the job."""
        namespace, name = actions.job
        client = self.client
        shown: int | None = None
        try:
            try:
                # The Service only gives rank 0 a name; nothing waits for it, so it goes out with the pods.
                service = client.create_service(actions.service) if actions.pods and actions.service else None
                await asyncio.gather(self._claims_then_pods(actions, turn), *((service,) if service else ()))
            except ApiError as exc:
                if not refuses(exc.status):
                    raise
                return Written(refusal=f"the API server refused the gang's pods: {exc}")
            placement = (actions.status or job.status).placement  # the pods' generation is the status's
            if actions.pods and placement is not None:
                shown = placement.generation
            if actions.delete_job:
                await client.delete_job(namespace, name)
        except ApiError as exc:
            self._failed(actions, exc)
            return Written(shown=shown, error=exc.reason or "unknown")
        return Written(shown=shown)

    async def _status(self, actions: JobActions, job: JobFacts) -> Written | None:
        if actions.status is None:
            return None
        namespace, name = actions.job
        try:
            version = await self.client.write_status(namespace, name, actions.status)
        except ApiError as exc:
            self._failed(actions, exc)
            return Written(error=exc.reason or "unknown", status_failed=True)
        self.statuses.wrote(job, version, actions.status)
        return None

    async def _new_workload(self, actions: JobActions) -> None:
        """The job generation's Kueue Workload, created if absent (its name is fixed per generation)."""
        if actions.workload is not None:
            await self.client.create_workload(actions.workload)

    async def _workloads(self, actions: JobActions) -> None:
        """The job's other Kueue Workload writes (``control.kueue_quota``): the stale ones deleted, the status
        patches applied (one that finds the Workload changed is worked out again by the next pass)."""
        namespace, _ = actions.job
        client = self.client
        await asyncio.gather(*(client.delete_workload(namespace, name) for name in actions.workload_deletions))
        await asyncio.gather(
            *(client.patch_workload_status(namespace, p.name, p.body) for p in actions.workload_patches)
        )

    async def _claims_then_pods(self, actions: JobActions, turn: Turn | None) -> None:
        # A pod names its claim: create the claims first (raises unless all exist).
        client = self.client
        await asyncio.gather(*(client.create_claim(body) for body in actions.claims))
        if turn is not None and actions.pods:
            await turn.wait()
        await asyncio.gather(*(client.create_pod(body) for body in actions.pods))  # raises unless all exist

    def _failed(self, actions: JobActions, exc: ApiError) -> None:
        self.metrics.api_errors.labels(operation=exc.reason or "unknown").inc()
        logger.warning("%s/%s: %s", *actions.job, exc)

    async def post_events(self, actions: JobActions) -> None:
        """Post the job's Events; one that fails is only logged (an Event says what happened; nothing waits)."""
        namespace, name = actions.job

        async def post(note: EventNote) -> None:
            await self.client.event(namespace, name, actions.uid, note.type, note.reason, note.message)

        async with self._slots().slot(Priority.EVENT):
            outcomes = await asyncio.gather(*(post(n) for n in actions.events), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                logger.debug("event on %s/%s not recorded: %s", namespace, name, outcome)
