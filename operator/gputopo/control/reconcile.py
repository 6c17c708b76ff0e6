"""One pass of the control loop over every job (pure): step each job, then drain the placement queue.

Input (``PassInput``) is what the indexes, the ledger and the operator's memory hold; output (``PassResult``) is
the actions per job, the plans to hold in the ledger, and when to look again. Nothing here talks to the API or
reads the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.actions import JobActions
from gputopo.control.admission import AdmissionAnswer, AdmissionCheck
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.gangactions import GangActions
from gputopo.control.gangpass import GangInput, GangPass
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import TERMINAL, Config, JobStep, settle, step, unreadable
from gputopo.control.preemptions import PreemptionSettings
from gputopo.control.preemptpass import Ended, PreemptionPass
from gputopo.control.priority import job_priority
from gputopo.control.quarantine import Quarantine
from gputopo.control.queue import Limits, Outcome, QueuedJob, drain
from gputopo.control.view import ClusterView, build_snapshot
from gputopo.control.warmup import warm, warm_shapes
from gputopo.placement.cache import PlacementCache
from gputopo.placement.preemption import Nomination
from gputopo.placement.types import Placement, Policy, Request, Snapshot
from gputopo.topology.model import Topology

__all__ = [
    "PassInput",
    "PassResult",
    "PassRules",
    "Reading",
    "World",
    "planned_from_status",
    "run_pass",
    "shown_generation",
]

Reading = tuple[str, Topology]  # a node's NodeTopology as a watch read it


@dataclass(frozen=True, slots=True)
class World:
    """What the indexes hold at the start of a pass."""

    jobs: Mapping[JobKey, JobFacts]
    job_pods: Mapping[JobKey, Sequence[PodFacts]]
    view: ClusterView
    gangs: GangInput | None = None  # the gangs gputopo places without owning them


@dataclass(frozen=True, slots=True)
class PassInput:
    """What a pass decides on: the indexes, the ledger and the operator's memory at ``now``.

    ``avoid``: nodes each job's gang is kept off; ``refused``: the API server's answers to jobs whose pods it
    refused to create (their jobs turn Invalid); ``busy``: jobs whose last writes are still going out or not
    yet back through the watches. ``readings``: the NodeTopologies the watch read since the last pass, in order,
    for the ``quarantine`` to observe at ``now``. ``cache``: the placement cache of earlier passes."""

    jobs: Mapping[JobKey, JobFacts]
    job_pods: Mapping[JobKey, Sequence[PodFacts]]
    view: ClusterView
    now: datetime
    ledger: Iterable[PlannedGang] = ()
    avoid: Mapping[JobKey, frozenset[str]] = field(default_factory=dict)
    refused: Mapping[JobKey, str] = field(default_factory=dict)
    busy: Collection[JobKey] = frozenset()
    quarantine: Quarantine | None = None
    readings: Sequence[Reading] = ()
    cache: PlacementCache | None = None
    gangs: GangInput | None = None  # the gangs gputopo places without owning them
    nominated: Mapping[JobKey, tuple[Nomination, datetime]] = field(default_factory=dict)  # decided, not read back
    trusted: Mapping[JobKey, frozenset[str]] = field(default_factory=dict)  # victims this operator chose, by preemptor
    admissions: Mapping[JobKey, AdmissionAnswer] | None = None  # dry runs' answers (``admission``); None: none asked


@dataclass(frozen=True, slots=True)
class PassRules:
    """How a pass decides: the operator's config, the placement policy and the queue's limits. With
    ``restarts_first``, a pass that restarts a gang places nothing: it records the restarts at once and asks to
    run again right away (``wake_at`` now), when the waiting jobs are placed."""

    config: Config
    place: Policy
    limits: Limits = field(default_factory=Limits)
    restarts_first: bool = False
    preemption: PreemptionSettings | None = None  # None: gputopo never preempts


@dataclass
class PassResult:
    actions: list[JobActions] = field(default_factory=list)
    reservations: list[PlannedGang] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    avoid: dict[JobKey, frozenset[str]] = field(default_factory=dict)
    restarts: list[str] = field(default_factory=list)  # reasons, for the metrics
    phases: dict[str, int] = field(default_factory=dict)
    queue_length: int = 0
    wake_at: datetime | None = None
    visible: dict[JobKey, int | None] = field(default_factory=dict)  # for Ledger.prune
    warmed: int = 0  # job shapes the planner decided ahead (nothing to place, nothing busy)
    gang_actions: list[GangActions] = field(default_factory=list)  # the foreign gangs' writes
    gang_plans: list[PlannedGang] = field(default_factory=list)  # their new plans, for the ledger
    preempted: list[Ended] = field(default_factory=list)  # the victims ended this pass
    waiting_for_checkpoint: int = 0  # preemptors that wait for their victims' next checkpoint this pass
    nominated: dict[JobKey, tuple[Nomination, datetime]] = field(default_factory=dict)  # for the next pass
    trusted: dict[JobKey, frozenset[str]] = field(default_factory=dict)  # for the next pass
    admission_checks: list[AdmissionCheck] = field(default_factory=list)  # dry runs to ask before preempting


def planned_from_status(statuses: Iterable[tuple[JobKey, TrainingJobStatus]]) -> list[PlannedGang]:
    """The plans of active jobs as their statuses record them."""
    plans = []
    for key, status in statuses:
        placement = status.placement
        if status.phase in TERMINAL or placement is None or not placement.workers:
            continue
        workers = tuple((w.node, tuple(w.gpus)) for w in placement.workers)
        plans.append(PlannedGang(key, placement.generation, workers))
    return plans


def shown_generation(job: JobFacts, pods: Sequence[PodFacts]) -> int | None:
    """The placement generation of the job's status whose pods the cluster shows, every rank of it."""
    placement = job.status.placement
    if placement is None or not placement.workers:
        return None
    ranks = {p.rank for p in pods if p.generation == placement.generation and p.owner_uid == job.uid}
    return placement.generation if all(w.rank in ranks for w in placement.workers) else None


def _visible_generation(job: JobFacts, pods: Sequence[PodFacts], status: TrainingJobStatus) -> int | None:
    """The generation the cluster shows whole; a plan this step abandoned (placement cleared) counts as
    shown, so the ledger lets its GPUs go even when its gang was never complete."""
    if status.placement is not None and not status.placement.workers and status.placement.generation:
        return status.placement.generation
    return shown_generation(job, pods)


def _queue_of(job: JobFacts, view: ClusterView) -> str:
    """The queue whose head a job may hold back: its Kueue ClusterQueue's once Kueue admitted it, else its
    namespace's ("")."""
    if job.queue_name is None or view.kueue is None:
        return ""
    queues = sorted({w.cluster_queue for w in view.kueue.of(job.uid) if w.cluster_queue})
    return f"clusterqueue/{queues[0]}" if queues else ""


def run_pass(
    facts: PassInput, rules: PassRules, on_placed: Callable[[JobActions, PlannedGang], None] | None = None
) -> PassResult:
    """Step every job that is not busy, then drain the queue of those that want placement.

    ``busy`` jobs are not stepped: a step would act on what they were before (create their pods again, place
    them twice). The GPUs their statuses hold still count, and the ledger keeps their plans until the cluster
    shows them. With ``limits.placements`` the queue stops after that many placements and the pass asks to run
    again at once for the rest (see ``queue.drain``); with ``limits.planning_seconds``, likewise once it has
    planned that long.

    ``on_placed`` is handed each placed job's actions (its new status among them) and plan as soon as the job
    is placed, so its writes can start while the queue behind it is still being planned; those actions are
    then not in the result's ``actions`` (their plans are in ``reservations``).

    A pass with a ``cache`` and a clock that has nothing to place and no busy job warms the planner
    (``gputopo.control.warmup``) for up to ``limits.planning_seconds``."""
    if facts.quarantine is not None:
        for node, topology in facts.readings:
            facts.quarantine.observe(node, topology, facts.now)
    state = _PassState(facts, rules, on_placed)
    state.step_all()
    state.carry_out()
    if state.queued and rules.restarts_first and state.out.restarts:
        state.out.wake_at = facts.now
    elif state.queued:
        state.drain()
    elif facts.cache is not None and (clock := rules.limits.clock) is not None and not facts.busy:
        budget = rules.limits.planning_seconds
        state.out.warmed = warm(
            state.snapshot,
            facts.cache,
            warm_shapes(facts.view),
            rules.place,
            rules.config.gpu_choice,
            clock,
            budget if budget is not None else float("inf"),
        )
    state.report()
    return state.out


class _PassState:
    """One pass's working state: each job's step, the queue, and the result being built."""

    def __init__(
        self, facts: PassInput, rules: PassRules, on_placed: Callable[[JobActions, PlannedGang], None] | None
    ) -> None:
        self.facts, self.rules, self.on_placed = facts, rules, on_placed
        self.out = PassResult()
        self.steps: dict[JobKey, JobStep] = {}
        self.queued: list[QueuedJob] = []
        self.waiting = [(key, facts.jobs[key]) for key in facts.busy if key in facts.jobs]
        self.handed: set[JobKey] = set()  # placed jobs whose actions went to on_placed
        self.gangs = GangPass(facts.gangs) if facts.gangs is not None else None
        self.preemption = (
            PreemptionPass(
                rules.preemption,
                facts.jobs,
                facts.job_pods,
                self.steps,
                self.gangs,
                facts.view,
                rules.config,
                facts.now,
                pending=facts.nominated,
                trusted=facts.trusted,
                admissions=facts.admissions,
            )
            if rules.preemption is not None and rules.preemption.enabled
            else None
        )

    def step_all(self) -> None:
        facts, config, out, now = self.facts, self.rules.config, self.out, self.facts.now
        for key, job in self.waiting:
            if job.status.phase not in TERMINAL:
                out.visible[key] = shown_generation(job, facts.job_pods.get(key, ()))
            phase = str(job.status.phase)
            out.phases[phase] = out.phases.get(phase, 0) + 1
        for key in sorted(facts.jobs):
            if key in facts.busy:
                continue
            job = facts.jobs[key]
            pods = facts.job_pods.get(key, ())
            try:
                result = step(job, pods, facts.view, config, now, facts.refused.get(key))
            except Exception as error:
                # The spec is validated before it is read; this is the fence for what validation misses: one job
                # never stops the pass for the others.
                result = unreadable(job, now, error, facts.view, config)
            self.steps[key] = result
            if job.status.phase not in TERMINAL:
                out.visible[key] = _visible_generation(job, pods, result.status)
            if result.avoid_nodes:
                out.avoid[key] = result.avoid_nodes
            if result.restart is not None:
                out.restarts.append(result.restart.reason)
            if result.wake_at is not None:
                out.wake_at = result.wake_at if out.wake_at is None else min(out.wake_at, result.wake_at)
            if result.wants_placement and job.spec is not None:
                self.queued.append(
                    QueuedJob(
                        key,
                        job_priority(job.spec, facts.view.priority_classes).value,
                        job.created or now,
                        Request.from_spec(job.spec, name=job.name, gpu_choice=config.gpu_choice),
                        facts.avoid.get(key, frozenset()) | result.avoid_nodes,
                        queue=_queue_of(job, facts.view),
                        uid=job.uid,
                    )
                )
        if self.gangs is not None:
            self.queued += self.gangs.step_all(facts.view, config, now, facts.busy, facts.avoid)
            out.visible.update(self.gangs.visible())
            for key, done in self.gangs.steps.items():
                if done.avoid_nodes:
                    out.avoid[key] = done.avoid_nodes
                if done.restarted is not None:
                    out.restarts.append(done.restarted)
                if done.wake_at is not None:
                    out.wake_at = done.wake_at if out.wake_at is None else min(out.wake_at, done.wake_at)

    def snapshot(self) -> Snapshot:
        """The cluster with every plan held: the ledger's and those the statuses record."""
        facts = self.facts
        statuses = [*((k, s.status) for k, s in self.steps.items()), *((k, job.status) for k, job in self.waiting)]
        planned = [*facts.ledger, *planned_from_status(statuses)]
        if self.gangs is not None:
            planned += self.gangs.held()
        return build_snapshot(facts.view, planned, self.rules.config.tiers, facts.quarantine, facts.now, facts.cache)

    def carry_out(self) -> None:
        """The nominations the statuses record read, and the victims they name ended (``preemptions``)."""
        if self.preemption is not None:
            self.preemption.read()
            self.preemption.carry_out()

    def drain(self) -> None:
        snapshot, preemption = self.snapshot(), self.preemption
        if preemption is not None and preemption.nominations:
            snapshot = preemption.hold(snapshot, self.queued)
        outcomes, after = drain(
            snapshot, self.queued, self.rules.place, self.facts.now, self.rules.limits, self.settled
        )
        if preemption is not None:
            preemption.decide(after, outcomes)
            if (retry := preemption.retry_at) is not None:  # a preemptor waits for its victims' next checkpoint
                self.out.wake_at = retry if self.out.wake_at is None else min(self.out.wake_at, retry)
        self.out.outcomes = outcomes
        deferred = len(self.queued) - len(outcomes)
        if deferred:
            self.out.queue_length += deferred
            self.out.wake_at = self.facts.now

    def settled(self, outcome: Outcome) -> None:
        """The queue's answer for one job, applied to its step as soon as it is decided."""
        facts, config = self.facts, self.rules.config
        key = outcome.queued.key
        if not isinstance(outcome.result, Placement):
            self.out.queue_length += 1
        if self.gangs is not None and key in self.gangs.steps:
            self.gangs.settled(key, outcome.result, facts.now)
            return
        try:
            plan = settle(facts.jobs[key], self.steps[key], outcome.result, facts.now, facts.view, config)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            # Building the gang read the template; the fence for what validation misses.
            self.steps[key] = unreadable(facts.jobs[key], facts.now, error, facts.view, config)
            return
        if plan is not None:
            self.out.reservations.append(plan)
            if self.on_placed is not None:
                result = self.steps[key]
                result.actions.status = result.status
                self.on_placed(result.actions, plan)
                self.handed.add(key)

    def report(self) -> None:
        """Each stepped job's phase counted, and its actions (its status when it changed) in the result."""
        out = self.out
        if self.preemption is not None:
            out.preempted = self.preemption.ended
            out.waiting_for_checkpoint = len(self.preemption.waiting)
            out.nominated = self.preemption.carried()
            out.trusted = self.preemption.kept_trust()
            out.admission_checks = self.preemption.checks
        if self.gangs is not None:
            out.gang_actions = self.gangs.actions()
            out.gang_plans = self.gangs.plans
        tried = {outcome.queued.key for outcome in out.outcomes}
        for key, result in self.steps.items():
            phase = str(result.status.phase)
            out.phases[phase] = out.phases.get(phase, 0) + 1
            if key in self.handed:
                continue
            if result.wants_placement and key not in tried and result.actions.reports_only:
                continue  # not tried yet (the pass stopped early): what it would report waits for its turn
            if result.status != self.facts.jobs[key].status:
                result.actions.status = result.status
            if result.actions:
                out.actions.append(result.actions)
