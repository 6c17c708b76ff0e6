"""The operator's shared state (kept in kopf's ``memo``), and the control loop that uses it.

One loop runs at a time: it is the daemon of the operator's ConfigMap, and kopf peering stops every
daemon of a replica that is not the leader. Each pass reads the indexes, runs the pure ``run_pass`` and
hands each job's actions to a writer of its own, which the next pass does not wait for.

The writers share the API concurrency through a priority gate: new gangs first, in queue order, then other
jobs' writes, then Events. While a job's writes go out, and until the watches show the pods they created,
the job is busy: passes leave it alone (``run_pass``'s ``busy``). Its plan is in the ledger from the moment it
is decided, so a pass planning meanwhile never gives its GPUs to another job.

While gangs' writes go out and the queue is empty, a pass has only reports to work out, and those wait for the
gangs anyway. News that cannot change a plan (pods of gputopo's jobs, pods' GPU reports, claims, a gang's
writes done) then runs a pass at most every ``QUIET_PASS_SECONDS``; news that can (a job new or changed,
hardware, a pod that is not gputopo's, the last gang's writes done, a time a pass asked for) runs one at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum

from gputopo.control.actions import EventNote, JobActions
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import Ledger, PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.quarantine import Quarantine
from gputopo.control.reconcile import Pass, run_pass, shown_generation
from gputopo.control.statuscache import StatusCache
from gputopo.control.view import ClusterView
from gputopo.controller.gate import PriorityGate
from gputopo.controller.metrics import Metrics
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.turns import NODE_TURN_SECONDS, NodeTurns, Turn
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import Policy

__all__ = ["REFUSED", "Priority", "Runtime", "World", "retry_delay"]

logger = logging.getLogger("gputopo.controller")


# A create the API server answers with one of these will fail again the same way: the spec is at fault
# (422 Invalid: validation; 400 BadRequest: a field of the wrong type). 403 is not one: quota exceeded or a
# service account not created yet pass, so it backs off and retries like any other failure.
REFUSED = frozenset({400, 422})
# Jobs applied at once: the API concurrency divided by this (a gang's pods go out together within its job).
JOB_CONCURRENCY_SHARE = 4
# Entries the placement cache may hold before a pass starts a new one (about 0.5 kB each: some 25 MB).
PLACEMENT_CACHE_ENTRIES = 50_000
DRAIN_SECONDS = 5.0  # how long a stopping loop lets the writes and Events still going out finish
# A job whose pods were created or ungated stays busy until the watch shows them so, or this long at most.
SHOWN_WITHIN_SECONDS = 10.0
# While gangs' writes go out, a job's report (a status, Events, nothing else) waits for them this long at
# most; a later pass reports whatever is true then, in one write instead of several.
REPORT_DELAY_SECONDS = 5.0
# While gangs' writes go out and the last pass had nothing to place, news that cannot change a plan waits this
# long after that pass for the next (each pass steps every job: a few ms per hundred jobs, under the GIL the
# writers need).
QUIET_PASS_SECONDS = 0.5


class Priority(IntEnum):
    """Who gets a free API slot first."""

    PLACEMENT = 0  # a gang of this pass's placements: its status, Service, claims, pods, gates
    UPDATE = 1  # any other job's writes: statuses, deletions, gates
    EVENT = 2  # Events say what happened; nothing waits for them


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
    urgent: asyncio.Event = field(default_factory=asyncio.Event)  # the news can change a plan: no quiet window
    # When the last pass ended having had nothing to place while gangs' writes went out (monotonic); None else.
    quiet_since: float | None = None
    # Each job's generation as last indexed: a job new or changed is news that can change a plan.
    generations: dict[JobKey, int] = field(default_factory=dict)
    # Each job's writes being applied, and the Events being posted after them.
    writing: dict[JobKey, asyncio.Task[None]] = field(default_factory=dict)
    events_in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    # Jobs whose pods were created or ungated and are not yet shown so by the watch: their placement
    # generation, and when to stop waiting.
    unseen: dict[JobKey, tuple[int, float]] = field(default_factory=dict)
    gate: PriorityGate | None = None  # made on first use, in the loop that uses it
    placing: int = 0  # gangs whose writes are going out
    # Jobs whose reports wait for the gangs' writes: since when (monotonic).
    reports_held: dict[JobKey, float] = field(default_factory=dict)
    report_timer: asyncio.TimerHandle | None = None  # the one poke due when the oldest report held is due
    passes: int = 0
    last_pass: datetime | None = None
    # What passes worked out about the nodes' models, for the next pass (started anew past its bound).
    placement_cache: PlacementCache = field(default_factory=PlacementCache)
    # devicePlugin mode: per node, new gangs release their pods in the order they were planned; a gang whose pods
    # are out gives up its turn once the watch shows them bound (placement generation, pods not yet seen bound).
    turns: NodeTurns = field(default_factory=NodeTurns)
    binding: dict[JobKey, tuple[Turn, int, set[str]]] = field(default_factory=dict)

    @property
    def config(self) -> Config:
        s = self.settings
        return Config(s.tiers, s.unschedulable_timeout_seconds, s.node_not_ready_grace_seconds, s.gpu_allocation)

    def poke(self, urgent: bool = True) -> None:
        """Something changed: run a pass soon. Not ``urgent``: the change cannot alter a plan (see the module)."""
        self.wake.set()
        if urgent:
            self.urgent.set()

    def pod_indexed(self, pod: PodFacts) -> None:
        """A pod event of a gputopo job: news for a pass (not urgent), and maybe the binding a turn waits for."""
        self.poke(urgent=False)
        if pod.job is None or not pod.node:
            return
        key = JobKey((pod.namespace, pod.job))
        held = self.binding.get(key)
        if held is None or pod.generation != held[1]:
            return
        held[2].discard(pod.name)
        if not held[2]:
            self._give_up_turn(key, held[0])

    def _give_up_turn(self, key: JobKey, turn: Turn) -> None:
        turn.release()
        held = self.binding.get(key)
        if held is not None and held[0] is turn:
            del self.binding[key]

    def job_indexed(self, job: JobFacts) -> None:
        """A TrainingJob event: urgent when the job is new or its spec changed, not for its status."""
        urgent = self.generations.get(job.key) != job.generation
        self.generations[job.key] = job.generation
        self.poke(urgent)

    def _slots(self) -> PriorityGate:
        if self.gate is None:
            self.gate = PriorityGate(max(1, self.settings.api_concurrency // JOB_CONCURRENCY_SHARE))
        return self.gate

    def busy(self, jobs: Mapping[JobKey, JobFacts], job_pods: Mapping[JobKey, Sequence[PodFacts]]) -> set[JobKey]:
        """Jobs a pass must not step: writes in flight, or pods created or ungated that the watch does not
        show so yet (a step would create them again, or lift their gates again)."""
        busy = {key for key in self.writing if key in jobs}
        clock = time.monotonic()
        for key, (generation, until) in list(self.unseen.items()):
            job = jobs.get(key)
            if job is None or clock >= until or _shown_ungated(job, job_pods.get(key, ()), generation):
                del self.unseen[key]
            else:
                busy.add(key)
        return busy

    # -- the loop ---------------------------------------------------------------------------------------------

    async def run(self, read: Callable[[], World], stopped: Callable[[], bool]) -> None:
        wake_at: datetime | None = None
        while not stopped():
            timeout = self.settings.resync_seconds
            if wake_at is not None:
                timeout = max(0.0, min(timeout, (wake_at - datetime.now(UTC)).total_seconds()))
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=timeout)
            except TimeoutError:
                self.urgent.set()  # a time the last pass asked for, or the resync
            if stopped():
                break
            if self.settings.settle_seconds:
                await asyncio.sleep(self.settings.settle_seconds)
            await self._quiet_window()
            self.wake.clear()
            self.urgent.clear()
            try:
                wake_at = await self.run_once(read())
            except Exception:  # one bad pass must not stop the loop; the next one starts afresh
                logger.exception("control pass failed")
                wake_at = None
        await self.drain()

    async def _quiet_window(self) -> None:
        """While gangs' writes go out after a pass that had nothing to place, wait out ``QUIET_PASS_SECONDS`` from
        it unless urgent news comes."""
        if self.quiet_since is None or not self.placing or self.urgent.is_set():
            return
        left = self.quiet_since + QUIET_PASS_SECONDS - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.urgent.wait(), timeout=left)

    async def drain(self) -> None:
        """Let the writes and Events still going out finish, for a while; cancel what is left."""
        if self.report_timer is not None:
            self.report_timer.cancel()
        for key, (turn, _, _) in list(self.binding.items()):
            self._give_up_turn(key, turn)
        pending = {*self.writing.values(), *self.events_in_flight}
        if not pending:
            return
        _, left = await asyncio.wait(pending, timeout=DRAIN_SECONDS)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)

    async def run_once(self, world: World, now: datetime | None = None) -> datetime | None:
        started = time.perf_counter()
        now = now or datetime.now(UTC)
        jobs = {
            key: self.statuses.freshest(job) for key, job in world.jobs.items() if self.settings.watches(job.namespace)
        }
        busy = self.busy(jobs, world.job_pods)
        self.statuses.forget(set(jobs))
        for key in [k for k, (_, until) in self.avoid.items() if until <= now or k not in jobs]:
            del self.avoid[key]
        for key in [k for k, (gen, _) in self.refused.items() if k not in jobs or jobs[k].generation != gen]:
            del self.refused[key]
        for key in [k for k in self.failures if k not in jobs]:
            del self.failures[key]
        for key in [k for k in self.generations if k not in world.jobs]:
            del self.generations[key]
        # The pass runs on the event loop, and plans for ``pass_planning_seconds`` at most (and at most
        # ``placements_per_pass`` jobs); the next pass plans the rest right after, the writes and the watches
        # going on between the two. (A pass in a thread of its own shared the interpreter with the loop: under
        # a burst the planner got half of it, and its decisions took five times as long.) Each job it places
        # has its writes started at once; they go out as soon as the pass yields.

        def placed(actions: JobActions, plan: PlannedGang) -> None:
            self._start(actions, jobs[actions.job], plan)

        if self.placement_cache.size() > PLACEMENT_CACHE_ENTRIES:
            self.placement_cache = PlacementCache()
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
            planning_seconds=self.settings.pass_planning_seconds,
            busy=busy,
            on_placed=placed,
            cache=self.placement_cache,
        )
        if result.warmed:
            logger.debug("planner warmed for %d job shapes", result.warmed)
        self.ledger.prune(result.visible)
        hold = timedelta(seconds=2 * self.settings.unschedulable_timeout_seconds)
        for key, nodes in result.avoid.items():
            old = self.avoid.get(key, (frozenset(), now))[0]
            self.avoid[key] = (old | nodes, now + hold)
        self.apply(result, jobs)
        for outcome in result.outcomes:
            kind = "placed" if outcome.queued.key in {r.job for r in result.reservations} else "unplaceable"
            self.metrics.placement_seconds.labels(result=kind).observe(outcome.seconds)
        self.metrics.observe_pass(time.perf_counter() - started, result.phases, result.queue_length, result.restarts)
        self.metrics.writing.labels(kind="placement").set(self.placing)
        self.metrics.writing.labels(kind="other").set(len(self.writing) - self.placing)
        self.metrics.writing.labels(kind="report held").set(len(self.reports_held))
        self.passes += 1
        self.last_pass = now
        self.quiet_since = time.monotonic() if not result.outcomes and result.wake_at != now else None
        return result.wake_at

    # -- applying a pass --------------------------------------------------------------------------------------

    def apply(self, result: Pass, jobs: Mapping[JobKey, JobFacts]) -> None:
        """Start the writes of the pass's other jobs (the placed ones started as they were placed).

        A job that only has something to report waits while gangs' writes go out, up to
        ``REPORT_DELAY_SECONDS``: the API server's time goes to the gangs, and a job that turned Running meanwhile
        and then had its GPUs reported costs one status write instead of two. The last gang's writes poke the loop
        when they are done, and a pass then reports everything held."""
        clock = time.monotonic()
        acting = set()
        for actions in result.actions:
            acting.add(actions.job)
            if actions.reports_only and self.placing:
                since = self.reports_held.setdefault(actions.job, clock)
                if clock - since < REPORT_DELAY_SECONDS:
                    continue
            self.reports_held.pop(actions.job, None)
            self._start(actions, jobs[actions.job])
        for key in [k for k in self.reports_held if k not in acting and k not in self.writing]:
            del self.reports_held[key]  # nothing to report any more (or the job is gone)
        if self.reports_held:
            self._poke_when_reports_due(min(self.reports_held.values()) + REPORT_DELAY_SECONDS - clock)

    def _poke_when_reports_due(self, delay: float) -> None:
        """One timed poke for the reports held, not one more per pass while they wait: a pending one that
        comes no later (within a few milliseconds: the two clocks are read apart) is kept."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        timer = self.report_timer
        if timer is not None and not timer.cancelled() and loop.time() <= timer.when() <= when + 0.005:
            return
        if timer is not None:
            timer.cancel()
        self.report_timer = loop.call_at(when, self.poke)

    def _start(self, actions: JobActions, job: JobFacts, plan: PlannedGang | None = None) -> None:
        """Start one job's writes (status, then Service and claims, pods) without waiting for them.

        They wait for a slot of the gate: at most ``JOB_CONCURRENCY_SHARE`` of the API concurrency's worth of
        jobs at once, new gangs first in the order they were placed, so each goes to kube-scheduler as soon as
        its own writes are done. A plan is in the ledger from now on, whatever its writes wait for."""
        turn = None
        if plan is not None:
            self.ledger.reserve(plan)
            self.placing += 1
            if self.settings.gpu_allocation is GpuAllocation.DEVICE_PLUGIN:
                turn = self.turns.take(node for node, _ in plan.workers)
        priority = Priority.PLACEMENT if plan is not None else Priority.UPDATE
        write = self._write(actions, job, plan, priority, turn, time.monotonic())
        self.writing[actions.job] = asyncio.create_task(write)

    async def _write(
        self,
        actions: JobActions,
        job: JobFacts,
        plan: PlannedGang | None,
        priority: Priority,
        turn: Turn | None,
        started: float,
    ) -> None:
        to_show = None
        try:
            async with self._slots().slot(priority):
                if priority is Priority.PLACEMENT:
                    self.metrics.gang_slot_wait.observe(time.monotonic() - started)
                to_show = await self._apply_job(actions, job, plan, turn)
            if to_show is not None:
                self.unseen[actions.job] = (to_show, time.monotonic() + SHOWN_WITHIN_SECONDS)
        except Exception:  # a bug in one job's writes must not go unheard; the next pass steps the job afresh
            logger.exception("writing %s/%s failed", *actions.job)
        finally:
            if turn is not None:
                self._after_turn(actions, turn, to_show)
            if self.writing.get(actions.job) is asyncio.current_task():
                del self.writing[actions.job]
            if priority is Priority.PLACEMENT:
                self.placing -= 1
            # The job can be stepped again: a placed gang's next step is a report, held while others go out;
            # after the last gang the reports held go at once.
            self.poke(urgent=priority is not Priority.PLACEMENT or not self.placing)
        if actions.events:
            task = asyncio.create_task(self._post_events(actions))
            self.events_in_flight.add(task)
            task.add_done_callback(self.events_in_flight.discard)

    def _after_turn(self, actions: JobActions, turn: Turn, generation: int | None) -> None:
        """The next gang on the gang's nodes may go once kube-scheduler has bound its pods (the kubelet admits
        them in that order), or after ``NODE_TURN_SECONDS``; at once when no pod went out."""
        names = {str(body.get("metadata", {}).get("name", "")) for body in actions.pods} - {""}
        if generation is None or not names:
            turn.release()
            return
        self.binding[actions.job] = (turn, generation, names)
        asyncio.get_running_loop().call_later(NODE_TURN_SECONDS, self._give_up_turn, actions.job, turn)

    async def _post_events(self, actions: JobActions) -> None:
        namespace, name = actions.job

        async def post(note: EventNote) -> None:
            await self.client.event(namespace, name, actions.uid, note.type, note.reason, note.message)

        async with self._slots().slot(Priority.EVENT):
            outcomes = await asyncio.gather(*(post(n) for n in actions.events), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                logger.debug("event on %s/%s not recorded: %s", namespace, name, outcome)

    async def _apply_job(
        self, actions: JobActions, job: JobFacts, plan: PlannedGang | None, turn: Turn | None = None
    ) -> int | None:
        """The job's writes in order; the placement generation whose pods it created or ungated, if any. With a
        ``turn`` (devicePlugin mode) the pods go out after those of the gangs planned before on their nodes."""
        namespace, name = actions.job
        client = self.client
        to_show: int | None = None
        try:
            if actions.status is not None:
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
                if turn is not None and actions.pods:
                    await turn.wait()
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
                placement = (actions.status or job.status).placement  # the pods' generation is the status's
                if (actions.pods or actions.ungate) and placement is not None:
                    to_show = placement.generation
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
        return to_show


def _shown_ungated(job: JobFacts, pods: Sequence[PodFacts], generation: int) -> bool:
    """Whether the watch shows every pod of ``generation`` (or a later one), none of them gated."""
    shown = shown_generation(job, pods)
    if shown is None or shown < generation:
        return False
    return not any(p.gated for p in pods if p.generation == shown and p.owner_uid == job.uid)
