"""One pass of the control loop over every job (pure): step each job, then drain the placement queue.

Input is what the indexes and the ledger hold; output is the actions per job, the plans to hold in the
ledger, and when to look again. Nothing here talks to the API or reads the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import TERMINAL, Config, JobStep, settle, step, unreadable
from gputopo.control.quarantine import Quarantine
from gputopo.control.queue import Outcome, QueuedJob, drain
from gputopo.control.view import ClusterView, build_snapshot
from gputopo.control.warmup import warm, warm_shapes
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import Placement, Policy, Request, Snapshot

__all__ = ["Pass", "planned_from_status", "run_pass", "shown_generation"]


@dataclass
class Pass:
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


def run_pass(
    jobs: Mapping[JobKey, JobFacts],
    job_pods: Mapping[JobKey, Sequence[PodFacts]],
    view: ClusterView,
    ledger: Iterable[PlannedGang],
    avoid: Mapping[JobKey, frozenset[str]],
    config: Config,
    now: datetime,
    place: Policy,
    quarantine: Quarantine | None = None,
    starvation_seconds: float = 300.0,
    clock: Callable[[], float] | None = None,
    restarts_first: bool = False,
    refused: Mapping[JobKey, str] | None = None,
    placements_per_pass: int | None = None,
    busy: Collection[JobKey] = frozenset(),
    planning_seconds: float | None = None,
    on_placed: Callable[[JobActions, PlannedGang], None] | None = None,
    cache: PlacementCache | None = None,
) -> Pass:
    """With ``restarts_first``, a pass that restarts a gang places nothing: it records the restarts at once
    and asks to run again right away (``wake_at`` now), when the waiting jobs are placed. ``refused`` holds
    the API server's answers to jobs whose pods it refused to create (their jobs turn Invalid). With
    ``placements_per_pass``, the queue stops after that many placements and the pass asks to run again at
    once for the rest (see ``queue.drain``); with ``planning_seconds``, likewise once it has planned that long.

    ``busy`` jobs are not stepped: their last writes are still going out, or not yet back through the
    watches, so a step would act on what they were before (create their pods again, place them twice). The
    GPUs their statuses hold still count, and the ledger keeps their plans until the cluster shows them.

    ``on_placed`` is handed each placed job's actions (its new status among them) and plan as soon as the job
    is placed, so its writes can start while the queue behind it is still being planned; those actions are
    then not in the pass's ``actions`` (their plans are in ``reservations``).

    ``cache`` is the placement cache of earlier passes (``build_snapshot``). A pass with a ``cache`` and a
    ``clock`` that has nothing to place and no ``busy`` job warms the planner (``gputopo.control.warmup``)
    for up to ``planning_seconds``."""
    out = Pass()
    steps: dict[JobKey, JobStep] = {}
    queued: list[QueuedJob] = []
    waiting = [(key, jobs[key]) for key in busy if key in jobs]
    for key, job in waiting:
        if job.status.phase not in TERMINAL:
            out.visible[key] = shown_generation(job, job_pods.get(key, ()))
        phase = str(job.status.phase)
        out.phases[phase] = out.phases.get(phase, 0) + 1
    for key in sorted(jobs):
        if key in busy:
            continue
        job = jobs[key]
        pods = job_pods.get(key, ())
        try:
            result = step(job, pods, view, config, now, (refused or {}).get(key))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            # The spec is validated before it is read; this is the fence for what validation misses.
            result = unreadable(job, now, error, view, config)
        steps[key] = result
        if job.status.phase not in TERMINAL:
            out.visible[key] = _visible_generation(job, pods, result.status)
        if result.avoid_nodes:
            out.avoid[key] = result.avoid_nodes
        if result.restart is not None:
            out.restarts.append(result.restart.reason)
        if result.wake_at is not None:
            out.wake_at = result.wake_at if out.wake_at is None else min(out.wake_at, result.wake_at)
        if result.wants_placement and job.spec is not None:
            queued.append(
                QueuedJob(
                    key,
                    job.spec.priority,
                    job.created or now,
                    Request.from_spec(job.spec, name=job.name, gpu_choice=config.gpu_choice),
                    avoid.get(key, frozenset()) | result.avoid_nodes,
                )
            )

    handed: set[JobKey] = set()  # placed jobs whose actions went to on_placed

    def snapshot_now() -> Snapshot:
        """The cluster with every plan held: the ledger's and those the statuses record."""
        statuses = [*((k, s.status) for k, s in steps.items()), *((k, job.status) for k, job in waiting)]
        return build_snapshot(view, [*ledger, *planned_from_status(statuses)], config.tiers, quarantine, now, cache)

    if queued and restarts_first and out.restarts:
        out.wake_at = now
    elif queued:
        snapshot = snapshot_now()

        def settled(outcome: Outcome) -> None:
            key = outcome.queued.key
            if not isinstance(outcome.result, Placement):
                out.queue_length += 1
            try:
                plan = settle(jobs[key], steps[key], outcome.result, now, view, config)
            except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
                # Building the gang read the template; the fence for what validation misses.
                steps[key] = unreadable(jobs[key], now, error, view, config)
                return
            if plan is not None:
                out.reservations.append(plan)
                if on_placed is not None:
                    result = steps[key]
                    result.actions.status = result.status
                    on_placed(result.actions, plan)
                    handed.add(key)

        outcomes, _ = drain(
            snapshot, queued, place, now, starvation_seconds, clock, placements_per_pass, settled, planning_seconds
        )
        out.outcomes = outcomes
        deferred = len(queued) - len(outcomes)
        if deferred:
            out.queue_length += deferred
            out.wake_at = now
    elif cache is not None and clock is not None and not busy:
        out.warmed = warm(
            snapshot_now,
            cache,
            warm_shapes(view),
            place,
            config.gpu_choice,
            clock,
            planning_seconds if planning_seconds is not None else float("inf"),
        )

    tried = {outcome.queued.key for outcome in out.outcomes}
    for key, result in steps.items():
        phase = str(result.status.phase)
        out.phases[phase] = out.phases.get(phase, 0) + 1
        if key in handed:
            continue
        if result.wants_placement and key not in tried and result.actions.reports_only:
            continue  # not tried yet (the pass stopped early): what it would report waits for its turn
        if result.status != jobs[key].status:
            result.actions.status = result.status
        if result.actions:
            out.actions.append(result.actions)
    return out
