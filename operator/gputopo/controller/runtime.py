"""The operator's shared state (kept in kopf's ``memo``), and the control loop that uses it.

One loop runs at a time: it is the daemon of the operator's ConfigMap, and kopf peering stops every
daemon of a replica that is not the leader. Each pass reads the indexes, runs the pure ``run_pass`` and
applies its actions through the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gputopo.control.actions import EventNote, JobActions
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import Ledger, PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.quarantine import Quarantine
from gputopo.control.reconcile import Pass, run_pass
from gputopo.control.statuscache import StatusCache
from gputopo.control.view import ClusterView
from gputopo.controller.client import KubeClient
from gputopo.controller.errors import ApiError
from gputopo.controller.metrics import Metrics
from gputopo.controller.settings import OperatorSettings
from gputopo.placement.types import Policy

__all__ = ["REFUSED", "Runtime", "World", "retry_delay"]

logger = logging.getLogger("gputopo.controller")


# A create the API server answers with one of these will fail again the same way: the spec is at fault
# (422 Invalid: validation; 400 BadRequest: a field of the wrong type). 403 is not one: quota exceeded or a
# service account not created yet pass, so it backs off and retries like any other failure.
REFUSED = frozenset({400, 422})
# Jobs applied at once: the API concurrency divided by this (a gang's pods go out together within its job).
JOB_CONCURRENCY_SHARE = 4
EVENT_CONCURRENCY = 4  # Events posted at once (of the API concurrency)
EVENTS_DRAIN_SECONDS = 5.0  # how long a stopping loop lets the Events still being posted finish


def retry_delay(failures: int) -> float:
    """Seconds before retrying a job whose apply failed ``failures`` times in a row: 0.5 s doubling to 30 s."""
    return float(min(30.0, 0.5 * 2 ** (failures - 1)))


@dataclass(frozen=True, slots=True)
class World:
    """What the indexes hold at the start of a pass."""

    jobs: Mapping[JobKey, JobFacts]
    job_pods: Mapping[JobKey, Sequence[PodFacts]]
    view: ClusterView


@dataclass
class Runtime:
    settings: OperatorSettings
    client: KubeClient
    place: Policy
    metrics: Metrics = field(default_factory=Metrics)
    ledger: Ledger = field(default_factory=Ledger)
    statuses: StatusCache = field(default_factory=StatusCache)
    quarantine: Quarantine = field(default_factory=lambda: Quarantine(60.0))
    avoid: dict[JobKey, tuple[frozenset[str], datetime]] = field(default_factory=dict)
    # Jobs whose pods the API server refused to create: (generation, its answer), until the spec changes.
    refused: dict[JobKey, tuple[int, str]] = field(default_factory=dict)
    # Consecutive failed applies per job, for the retry backoff.
    failures: dict[JobKey, int] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Events being posted: they follow a pass's writes without holding up its gangs or the next pass.
    events_in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    # Events take at most these of the API concurrency, so a pass's Events never queue ahead of gangs' writes.
    event_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(EVENT_CONCURRENCY))
    passes: int = 0
    last_pass: datetime | None = None

    @property
    def config(self) -> Config:
        s = self.settings
        return Config(s.tiers, s.unschedulable_timeout_seconds, s.node_not_ready_grace_seconds, s.gpu_allocation)

    def poke(self) -> None:
        """Something changed: run a pass soon."""
        self.wake.set()

    # -- the loop ---------------------------------------------------------------------------------------------

    async def run(self, read: Callable[[], World], stopped: Callable[[], bool]) -> None:
        wake_at: datetime | None = None
        while not stopped():
            timeout = self.settings.resync_seconds
            if wake_at is not None:
                timeout = max(0.0, min(timeout, (wake_at - datetime.now(UTC)).total_seconds()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=timeout)
            if stopped():
                break
            if self.settings.settle_seconds:
                await asyncio.sleep(self.settings.settle_seconds)
            self.wake.clear()
            try:
                wake_at = await self.run_once(read())
            except Exception:  # one bad pass must not stop the loop; the next one starts afresh
                logger.exception("control pass failed")
                wake_at = None
        if self.events_in_flight:
            await asyncio.wait(self.events_in_flight, timeout=EVENTS_DRAIN_SECONDS)

    async def run_once(self, world: World, now: datetime | None = None) -> datetime | None:
        started = time.perf_counter()
        now = now or datetime.now(UTC)
        jobs = {
            key: self.statuses.freshest(job) for key, job in world.jobs.items() if self.settings.watches(job.namespace)
        }
        self.statuses.forget(set(jobs))
        for key in [k for k, (_, until) in self.avoid.items() if until <= now or k not in jobs]:
            del self.avoid[key]
        for key in [k for k, (gen, _) in self.refused.items() if k not in jobs or jobs[k].generation != gen]:
            del self.refused[key]
        for key in [k for k in self.failures if k not in jobs]:
            del self.failures[key]
        result = run_pass(
            jobs,
            world.job_pods,
            world.view,
            list(self.ledger),
            {k: nodes for k, (nodes, _) in self.avoid.items()},
            self.config,
            now,
            self.place,
            self.quarantine,
            self.settings.starvation_seconds,
            time.perf_counter,
            restarts_first=True,
            refused={key: message for key, (_, message) in self.refused.items()},
            placements_per_pass=self.settings.placements_per_pass,
        )
        self.ledger.prune(result.visible)
        hold = timedelta(seconds=2 * self.settings.unschedulable_timeout_seconds)
        for key, nodes in result.avoid.items():
            old = self.avoid.get(key, (frozenset(), now))[0]
            self.avoid[key] = (old | nodes, now + hold)
        await self.apply(result, jobs)
        for outcome in result.outcomes:
            kind = "placed" if outcome.queued.key in {r.job for r in result.reservations} else "unplaceable"
            self.metrics.placement_seconds.labels(result=kind).observe(outcome.seconds)
        self.metrics.observe_pass(time.perf_counter() - started, result.phases, result.queue_length, result.restarts)
        self.passes += 1
        self.last_pass = now
        return result.wake_at

    # -- applying a pass --------------------------------------------------------------------------------------

    async def apply(self, result: Pass, jobs: Mapping[JobKey, JobFacts]) -> None:
        """Each job's writes in order (status, then Service and claims, pods, gates), at most
        ``JOB_CONCURRENCY_SHARE`` of the API concurrency's worth of jobs at once, new gangs first in queue order.

        Sharing the API concurrency among every job of the pass at once would finish them all together at the
        end of the pass; a bounded number of jobs at a time lets each gang go to kube-scheduler as soon as its
        own writes are done, at the same total throughput."""
        plans = {plan.job: plan for plan in result.reservations}
        rank = {plan.job: i for i, plan in enumerate(result.reservations)}
        ordered = sorted(result.actions, key=lambda a: rank.get(a.job, len(rank)))
        gate = asyncio.Semaphore(max(1, self.settings.api_concurrency // JOB_CONCURRENCY_SHARE))

        async def one(actions: JobActions) -> None:
            async with gate:
                await self._apply_job(actions, jobs[actions.job], plans.get(actions.job))
            if actions.events:
                task = asyncio.create_task(self._post_events(actions))
                self.events_in_flight.add(task)
                task.add_done_callback(self.events_in_flight.discard)

        await asyncio.gather(*(one(a) for a in ordered))

    async def _post_events(self, actions: JobActions) -> None:
        namespace, name = actions.job

        async def post(note: EventNote) -> None:
            async with self.event_slots:
                await self.client.event(namespace, name, actions.uid, note.type, note.reason, note.message)

        outcomes = await asyncio.gather(*(post(n) for n in actions.events), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                logger.debug("event on %s/%s not recorded: %s", namespace, name, outcome)

    async def _apply_job(self, actions: JobActions, job: JobFacts, plan: PlannedGang | None) -> None:
        namespace, name = actions.job
        client = self.client
        try:
            if actions.status is not None:
                if plan is not None:
                    self.ledger.reserve(plan)
                try:
                    version = await client.write_status(namespace, name, actions.status)
                except ApiError:
                    if plan is not None:
                        self.ledger.release(actions.job)
                    raise
                self.statuses.wrote(job, version, actions.status)
            await asyncio.gather(
                *(client.delete_pod(namespace, d.name, d.grace_seconds) for d in actions.deletions),
                *(client.delete_claim(namespace, claim) for claim in actions.claim_deletions),
            )

            async def claims_then_pods() -> None:
                # A pod names its claim: create the claims first (raises unless all exist).
                await asyncio.gather(*(client.create_claim(body) for body in actions.claims))
                await asyncio.gather(*(client.create_pod(body) for body in actions.pods))  # raises unless all exist

            try:
                # The Service only gives rank 0 a name; nothing waits for it, so it goes out with the pods.
                service = client.create_service(actions.service) if actions.pods and actions.service else None
                await asyncio.gather(claims_then_pods(), *((service,) if service is not None else ()))
            except ApiError as exc:
                if exc.status not in REFUSED:
                    raise
                # The API server will refuse this gang until its spec changes: the next pass marks the job
                # Invalid with these words and deletes what was created; its GPUs are free again now.
                self.refused[actions.job] = (job.generation, f"the API server refused the gang's pods: {exc}")
                self.ledger.release(actions.job)
                self.poke()
            else:
                await asyncio.gather(
                    *(client.ungate(namespace, pod) for pod in (*actions.ungate, *actions.ungate_once_created))
                )
                if actions.delete_job:
                    await client.delete_job(namespace, name)
        except ApiError as exc:
            self.metrics.api_errors.labels(operation=exc.reason or "unknown").inc()
            logger.warning("%s/%s: %s", namespace, name, exc)
            failures = self.failures[actions.job] = self.failures.get(actions.job, 0) + 1
            delay = retry_delay(failures)
            asyncio.get_running_loop().call_later(delay, self.poke)  # retry, backing off
        else:
            self.failures.pop(actions.job, None)
