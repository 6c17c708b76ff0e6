"""The operator's shared state (kept in kopf's ``memo``), and the control loop that uses it.

One loop runs at a time: it is the daemon of the operator's ConfigMap, and kopf peering stops every
daemon of a replica that is not the leader. Each pass reads the indexes, runs the pure ``run_pass`` and
hands each job's actions to a task of its own, which the next pass does not wait for: the ``Writer`` carries them
out, and the job's ``Memory`` (``gputopo.control.memory``) keeps what became of them for the passes after. While
a job's writes go out, and until the watches show the pods they created, the job is busy: passes leave it alone.
Its plan is in the ledger from the moment it is decided, so a pass planning meanwhile never gives its GPUs to
another job.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gputopo.api.fields import failure
from gputopo.control.actions import JobActions
from gputopo.control.dra import GpuAllocation
from gputopo.control.explain.pending import pending_by_reason
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import Ledger, PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.memory import Memory, Release
from gputopo.control.quarantine import Quarantine
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassResult, PassRules, Reading, World, run_pass
from gputopo.control.statuscache import StatusCache
from gputopo.controller.dryruns import DryRuns
from gputopo.controller.gangside import GangSide
from gputopo.controller.metrics import Metrics
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.turns import NODE_TURN_SECONDS, NodeTurns, Turn
from gputopo.controller.writer import Priority, Writer
from gputopo.kube.client import KubeClient
from gputopo.placement.cache import PlacementCache
from gputopo.placement.preemption import Nomination
from gputopo.placement.types import Policy
from gputopo.topology.model import Topology

__all__ = ["Priority", "Runtime", "World"]

logger = logging.getLogger("gputopo.controller")

# Entries the placement cache may hold before a pass starts a new one (about 0.5 kB each: some 25 MB).
PLACEMENT_CACHE_ENTRIES = 50_000
DRAIN_SECONDS = 5.0  # how long a stopping loop lets the writes and Events still going out finish
# While gangs' writes go out and the last pass had nothing to place, news that cannot change a plan waits this
# long after that pass for the next (each pass steps every job: a few ms per hundred jobs, under the GIL the
# writers need).
QUIET_PASS_SECONDS = 0.5


@dataclass
class Runtime:
    settings: OperatorSettings
    client: KubeClient
    place: Policy
    metrics: Metrics = field(default_factory=Metrics)
    ledger: Ledger = field(default_factory=Ledger)
    statuses: StatusCache = field(default_factory=StatusCache)
    quarantine: Quarantine = field(default_factory=lambda: Quarantine(60.0))
    memory: Memory = field(default_factory=Memory)  # what the passes remember of each job
    readings: list[Reading] = field(default_factory=list)  # NodeTopologies read since the last pass
    # Nominations decided whose status writes are not read back yet (``PreemptionPass.carried``).
    nominated: dict[JobKey, tuple[Nomination, datetime]] = field(default_factory=dict)
    trusted: dict[JobKey, frozenset[str]] = field(default_factory=dict)  # the victims it chose, by preemptor
    dry_runs: DryRuns = field(default_factory=DryRuns)  # asked before preempting for a TrainingJob
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    urgent: asyncio.Event = field(default_factory=asyncio.Event)  # the news can change a plan: no quiet window
    # When the last pass ended having had nothing to place while gangs' writes went out (monotonic); None else.
    quiet_since: float | None = None
    writing: dict[JobKey, asyncio.Task[None]] = field(default_factory=dict)  # each job's writes going out
    events_in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    placing: int = 0  # gangs whose writes are going out
    report_timer: asyncio.TimerHandle | None = None  # the one poke due when the oldest report held is due
    passes: int = 0
    last_pass: datetime | None = None
    # What passes worked out about the nodes' models, for the next pass (started anew past its bound).
    placement_cache: PlacementCache = field(default_factory=PlacementCache)
    turns: NodeTurns = field(default_factory=NodeTurns)  # devicePlugin mode: see ``turns``
    gangs: GangSide | None = None  # the gangs gputopo places without owning them (``settings.gangs``)

    writer: Writer = field(init=False)

    def __post_init__(self) -> None:
        self.writer = Writer(self.client, self.statuses, self.metrics, self.settings.api_concurrency)
        if self.gangs is None and self.settings.gangs:
            self.gangs = GangSide(
                self.client,
                self.poke,
                self.settings.gang_arrival_timeout_seconds,
                self.settings.watches,
                poke_soon=lambda: self.poke(urgent=False),
                record_retention=self.settings.gang_record_retention_seconds,
                planning_seconds=self.settings.gang_planning_seconds,
                headroom=self.settings.gang_phantom_headroom_ranks,
            )

    @property
    def config(self) -> Config:
        s = self.settings
        return Config(
            s.tiers, s.unschedulable_timeout_seconds, s.node_not_ready_grace_seconds, s.gpu_allocation, s.queue_names
        )

    def poke(self, urgent: bool = True) -> None:
        """Something changed: run a pass soon. Not ``urgent``: the change cannot alter a plan (see the module)."""
        self.wake.set()
        if urgent:
            self.urgent.set()

    def pod_indexed(self, pod: PodFacts) -> None:
        """A pod event of a gputopo job: news for a pass (not urgent), and maybe the binding a turn waits for."""
        self.poke(urgent=False)
        turn = self.memory.pod_bound(pod)
        if turn is not None:
            turn.release()

    def job_indexed(self, job: JobFacts) -> None:
        """A TrainingJob event: urgent when the job is new or its spec changed, not for its status."""
        self.poke(self.memory.indexed(job))

    def topology_read(self, node: str, topology: Topology) -> None:
        """A NodeTopology with new content: the next pass's quarantine observes it."""
        self.readings.append((node, topology))

    def _give_up_turn(self, key: JobKey, turn: Release) -> None:
        turn.release()
        self.memory.turn_given_up(key, turn)

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
            except Exception as error:  # one bad pass must not stop the loop; the next one starts afresh
                logger.exception("control pass failed")
                self.metrics.pass_failed(failure(error))
                wake_at = None
            else:
                self.metrics.pass_completed()
        await self.drain()

    async def _quiet_window(self) -> None:
        """While gangs' writes go out (TrainingJobs' or foreign gangs' new plans) after a pass that had nothing to
        place, wait out ``QUIET_PASS_SECONDS`` from it unless urgent news comes."""
        placing = self.placing or (self.gangs is not None and self.gangs.placing)
        if self.quiet_since is None or not placing or self.urgent.is_set():
            return
        left = self.quiet_since + QUIET_PASS_SECONDS - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.urgent.wait(), timeout=left)

    async def drain(self) -> None:
        """Let the writes and Events still going out finish, for a while; cancel what is left."""
        if self.report_timer is not None:
            self.report_timer.cancel()
        for key, turn in self.memory.bindings():
            self._give_up_turn(key, turn)
        await self.dry_runs.close()
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
        tick = time.monotonic()
        jobs = {
            key: self.statuses.freshest(job) for key, job in world.jobs.items() if self.settings.watches(job.namespace)
        }
        busy = self.memory.before_pass(jobs, world.job_pods, world.jobs.keys(), self.writing, now, tick)
        if self.gangs is not None:
            busy = {*busy, *self.gangs.busy()}
        self.statuses.forget(set(jobs))
        # The pass runs on the event loop, planning for ``pass_planning_seconds`` (and ``placements_per_pass``
        # jobs) at most; the next plans the rest right after. (In a thread of its own, under a burst the planner
        # got half the interpreter, and took five times as long.) Each job placed has its writes started at once.

        def placed(actions: JobActions, plan: PlannedGang) -> None:
            self._start(actions, jobs[actions.job], plan)

        if self.placement_cache.size() > PLACEMENT_CACHE_ENTRIES:
            self.placement_cache = PlacementCache()
        readings, self.readings = self.readings, []
        facts = PassInput(
            jobs,
            world.job_pods,
            world.view,
            now,
            ledger=list(self.ledger),
            avoid=self.memory.avoided(),
            refused=self.memory.refusals(),
            busy=busy,
            quarantine=self.quarantine,
            readings=readings,
            cache=self.placement_cache,
            gangs=world.gangs,
            nominated=self.nominated,
            trusted=self.trusted,
            admissions=dict(self.dry_runs.answers),
        )
        s = self.settings
        limits = Limits(s.starvation_seconds, s.placements_per_pass, s.pass_planning_seconds, time.perf_counter)
        preemption = s.preemption_settings
        rules = PassRules(self.config, self.place, limits, restarts_first=True, preemption=preemption)
        result = run_pass(facts, rules, placed)
        self.nominated, self.trusted = result.nominated, result.trusted
        self.dry_runs.prune(jobs.keys())
        self.dry_runs.ask(result.admission_checks, self.client, self.poke)
        if result.warmed:
            logger.debug("planner warmed for %d job shapes", result.warmed)
        self.ledger.prune(result.visible)
        self.memory.avoid(result.avoid, now, timedelta(seconds=2 * s.unschedulable_timeout_seconds))
        self.apply(result, jobs)
        self._start_gangs(result)
        held = len(self.memory.reports_held())
        self.metrics.observe_result(result, time.perf_counter() - started, self.placing, len(self.writing), held)
        self.metrics.observe_pending(
            pending_by_reason(jobs.values(), world.gangs.records.values() if world.gangs else ())
        )
        self.passes += 1
        self.last_pass = now
        self.quiet_since = time.monotonic() if not result.outcomes and result.wake_at != now else None
        return result.wake_at

    # -- applying a pass --------------------------------------------------------------------------------------

    def apply(self, result: PassResult, jobs: Mapping[JobKey, JobFacts]) -> None:
        """Start the writes of the pass's other jobs (the placed ones started as they were placed), but the
        reports the memory holds back while gangs' writes go out (``Memory.hold_reports``). The last gang's writes
        poke the loop when they are done, and a pass then reports everything held."""
        start, due = self.memory.hold_reports(result.actions, bool(self.placing), self.writing, time.monotonic())
        for actions in start:
            self._start(actions, jobs[actions.job])
        if due is not None:
            self._poke_when_reports_due(due)

    def _start_gangs(self, result: PassResult) -> None:
        """The foreign gangs' writes, each on a task of its own; their new plans are in the ledger from now."""
        if self.gangs is None:
            return
        for plan in result.gang_plans:
            self.ledger.reserve(plan)
        for actions in result.gang_actions:
            self.gangs.start(actions, self.writer.gate)

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
        """Start one job's writes without waiting for them (see ``writer``). A plan is in the ledger from now on,
        whatever its writes wait for."""
        turn = None
        if plan is not None:
            self.ledger.reserve(plan)
            self.placing += 1
            if self.settings.gpu_allocation is GpuAllocation.DEVICE_PLUGIN:
                turn = self.turns.take(node for node, _ in plan.workers)
        # A Workload to make is what Kueue waits for before it can admit the job: as urgent as a placement.
        urgent = plan is not None or actions.workload is not None
        priority = Priority.PLACEMENT if urgent else Priority.UPDATE
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
        shown = None
        try:
            written = await self.writer.write(actions, job, priority, turn, started)
            shown = written.shown
            if Memory.frees_plan(written, placed=plan is not None):
                self.ledger.release(actions.job)  # the next pass marks a refused job Invalid
            delay = self.memory.written(actions.job, job.generation, written, time.monotonic())
            if written.refusal is not None:
                self.poke()
            if delay is not None:
                asyncio.get_running_loop().call_later(delay, self.poke)  # retry, backing off
        except Exception:  # a bug in one job's writes must not go unheard; the next pass steps the job afresh
            logger.exception("writing %s/%s failed", *actions.job)
        finally:
            if turn is not None:
                self._after_turn(actions, turn, shown)
            if self.writing.get(actions.job) is asyncio.current_task():
                del self.writing[actions.job]
            if plan is not None:
                self.placing -= 1
            # The job can be stepped again: a placed gang's next step is a report, held while others go out;
            # after the last gang the reports held go at once.
            self.poke(urgent=plan is None or not self.placing)
        if actions.events:
            task = asyncio.create_task(self.writer.post_events(actions))
            self.events_in_flight.add(task)
            task.add_done_callback(self.events_in_flight.discard)

    def _after_turn(self, actions: JobActions, turn: Turn, generation: int | None) -> None:
        """The next gang on the gang's nodes may go once kube-scheduler has bound its pods (the kubelet admits
        them in that order), or after ``NODE_TURN_SECONDS``; at once when no pod went out."""
        names = {str(body.get("metadata", {}).get("name", "")) for body in actions.pods} - {""}
        if generation is None or not names:
            turn.release()
            return
        self.memory.binds(actions.job, turn, generation, names)
        asyncio.get_running_loop().call_later(NODE_TURN_SECONDS, self._give_up_turn, actions.job, turn)
