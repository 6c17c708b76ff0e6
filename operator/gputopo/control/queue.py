"""The placement queue: priority first, then age, with backfill of jobs that fit now.

One pass over the queue places what fits against one snapshot, reserving each placement before trying
the next job, so two plans of one pass never share a GPU. A job that does not fit does not stop smaller
ones behind it (backfill), except that once the head of a queue has waited ``starvation_seconds`` only jobs
of that queue of at least its priority may go ahead of it. A queue is a namespace's jobs, or the jobs of one
Kueue ClusterQueue (``QueuedJob.queue``): a starving head holds back its own queue, never another tenant's.

A job that could not be placed even on the empty cluster (more GPUs than it has, a label or tier no node has) is
Unplaceable at once with that reason (``NEVER_FITS``) and never heads its queue: it would hold the queue behind it
for ever. The empty cluster is tried only for a job that would otherwise head its queue, so a pass plans at most
one such job again per queue.

A pass may stop after ``limit`` placements, or once it has planned for ``budget`` seconds: the jobs after
that are left for the next pass, which then starts at once. The plans made so far go out to the API server
while the rest are still being planned, instead of every job of a long queue waiting for the whole queue to
be planned. Which job gets what does not change: the next pass sees the same queue, in the same order, with
these placements reserved.

GPUs nominated to a preemptor are held in the snapshot the queue is given; only that preemptor's view has them
free (``QueuedJob.nominated``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gputopo.api.fields import failure
from gputopo.control.facts import JobKey
from gputopo.placement.types import Placement, Policy, Request, Snapshot, Unplaceable

__all__ = ["NEVER_FITS", "PLANNING_FAILED", "Limits", "Outcome", "QueuedJob", "drain", "empty_cluster", "order"]

NEVER_FITS = "cannot fit even the empty cluster"
PLANNING_FAILED = "gputopo could not plan it"


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a pass's queue may wait and be planned: ``starvation_seconds`` for the head of a queue;
    at most ``placements`` jobs placed, or ``planning_seconds`` planned on ``clock`` (None: no bound).
    ``never_fits``: a would-be head that does not fit the empty cluster is told so and heads nothing (off: the
    queue of before, where it headed its queue, for comparing with it)."""

    starvation_seconds: float = 300.0
    placements: int | None = None
    planning_seconds: float | None = None
    clock: Callable[[], float] | None = None
    never_fits: bool = True


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job or gang waiting for a plan. ``planner``, when set, plans it instead of the policy on ``request``
    (a foreign gang of several shapes or parts is more than one request); ``request`` then only describes it."""

    key: JobKey
    priority: int
    queued_since: datetime  # creation time: a re-placed job keeps its place in line
    request: Request
    avoid_nodes: frozenset[str] = frozenset()
    planner: Callable[[Snapshot], Placement | Unplaceable] | None = None
    nominated: Placement | None = None  # GPUs the snapshot holds for it alone (a preemption's nomination)
    queue: str = ""  # the queue its starvation rule holds back: a Kueue ClusterQueue's, else "" (its namespace)
    uid: str = ""  # how a message of another namespace names it (a ClusterQueue is shared by namespaces)

    @property
    def name(self) -> str:
        return self.key[1]

    @property
    def queue_name(self) -> str:
        """The queue it waits in: ``queue`` when set, else ``namespace/<its namespace>``."""
        return self.queue or f"namespace/{self.key[0]}"


@dataclass(frozen=True, slots=True)
class Outcome:
    queued: QueuedJob
    result: Placement | Unplaceable
    seconds: float = 0.0  # engine time


def order(jobs: Iterable[QueuedJob]) -> list[QueuedJob]:
    return sorted(jobs, key=lambda q: (-q.priority, q.queued_since, q.key))


def empty_cluster(snapshot: Snapshot) -> Snapshot:
    """The cluster of ``snapshot`` with no GPU held by anyone (its nodes as they are otherwise)."""
    return Snapshot([replace(n, used_gpus=frozenset()) for n in snapshot], snapshot.tiers, snapshot.cache)


def _without(snapshot: Snapshot, nodes: frozenset[str]) -> Snapshot:
    for name in nodes:
        if name in snapshot:
            snapshot = snapshot.with_node(replace(snapshot.node(name), schedulable=False))
    return snapshot


def _plan(queued: QueuedJob, view: Snapshot, place: Policy) -> Placement | Unplaceable:
    """The job's plan; a job whose planning trips a bug is Unplaceable, naming what failed: one job never stops
    the queue for the others."""
    try:
        return queued.planner(view) if queued.planner is not None else place(view, queued.request)
    except Exception as error:
        return Unplaceable(f"{PLANNING_FAILED}: {failure(error)}")


def drain(
    snapshot: Snapshot,
    jobs: Sequence[QueuedJob],
    place: Policy,
    now: datetime,
    limits: Limits = Limits(),
    on_outcome: Callable[[Outcome], None] | None = None,
) -> tuple[list[Outcome], Snapshot]:
    """Try the queued jobs in order; the snapshot returned has every placement of the pass reserved.

    Stop once ``limits.placements`` jobs are placed, or (with a ``limits.clock``) once a job was placed and the
    pass has planned ``limits.planning_seconds``. The jobs not tried get no outcome (the caller counts them as
    still queued and runs another pass). ``on_outcome`` hears each outcome as soon as it is decided, before the
    next job is tried."""
    clock, limit, budget, starvation_seconds = (
        limits.clock,
        limits.placements,
        limits.planning_seconds,
        limits.starvation_seconds,
    )
    outcomes: list[Outcome] = []
    heads: dict[str, QueuedJob] = {}
    empty: Snapshot | None = None
    placed = 0
    began = clock() if clock is not None else 0.0
    for queued in order(jobs):
        if limit is not None and placed >= limit:
            break
        if budget is not None and clock is not None and placed and clock() - began >= budget:
            break
        head = heads.get(queued.queue_name)
        if head is not None:
            starving = (now - head.queued_since).total_seconds() >= starvation_seconds
            if starving and queued.priority < head.priority:
                outcomes.append(
                    Outcome(
                        queued,
                        Unplaceable(
                            f"waiting behind {_named(head, queued.key[0])} (priority {head.priority}), "
                            f"queued {int((now - head.queued_since).total_seconds())}s"
                        ),
                    )
                )
                if on_outcome is not None:
                    on_outcome(outcomes[-1])
                continue
        own = snapshot.release(queued.nominated) if queued.nominated is not None else snapshot
        view = _without(own, queued.avoid_nodes) if queued.avoid_nodes else own
        start = clock() if clock else 0.0
        result = _plan(queued, view, place)
        # A job whose planning tripped a bug neither heads its queue nor is tried on the empty cluster.
        if isinstance(result, Unplaceable) and head is None and not result.reason.startswith(PLANNING_FAILED):
            alone = None
            if limits.never_fits:
                empty = empty if empty is not None else empty_cluster(snapshot)
                alone = _plan(queued, empty, place)
            if isinstance(alone, Unplaceable):
                result = Unplaceable(f"{NEVER_FITS}: {alone.reason}", alone.details)
            else:
                heads[queued.queue_name] = queued
        spent = (clock() - start) if clock else 0.0
        if isinstance(result, Placement):
            snapshot = own.reserve(result)
            placed += 1
        outcomes.append(Outcome(queued, result, spent))
        if on_outcome is not None:
            on_outcome(outcomes[-1])
    return outcomes, snapshot


def _named(job: QueuedJob, reader: str) -> str:
    """``job`` as a message of namespace ``reader`` names it: by name in its own namespace, else by UID only."""
    return job.name if job.key[0] == reader else f"a job of another namespace (UID {job.uid or 'unknown'})"
