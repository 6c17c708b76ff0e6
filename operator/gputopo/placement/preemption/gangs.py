"""What preemption reads: the running gangs, the gang that wants to preempt, nominations and the rules.

All times are seconds on one clock the caller chooses (the operator's ``now``, the simulator's time); nothing
here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gputopo.api.clusterfile import PreemptionPolicy
from gputopo.placement.shapes import Shape
from gputopo.placement.types import Placement, Request

__all__ = [
    "Nomination",
    "PreemptionPolicy",
    "PreemptionRules",
    "Preemptor",
    "RunningGang",
    "gpus_by_node",
    "resumes_from",
    "victim_allowance",
]


def resumes_from(since: float, interval: float | None, now: float) -> float:
    """What a restart at ``now`` resumes from, given the checkpoint (or start) ``since`` and, when the gang declares
    it, the ``interval`` it saves at after it: the last of those checkpoints by ``now``."""
    if interval and now > since:
        since += math.floor((now - since) / interval) * interval
    return since


def gpus_by_node(placement: Placement) -> dict[str, frozenset[int]]:
    """The placement's GPUs per node."""
    out: dict[str, set[int]] = {}
    for worker in placement.workers:
        out.setdefault(worker.node, set()).update(worker.gpus)
    return {node: frozenset(gpus) for node, gpus in out.items()}


@dataclass(frozen=True, slots=True)
class RunningGang:
    """A gang that holds GPUs now: always preempted whole, never in part.

    ``checkpoint_time`` is when it last saved its state (what a restart resumes from), and
    ``checkpoint_interval_s`` how often it saves (declared by the gang: its next checkpoints are then known);
    ``preempted_at`` when it was last preempted, which protects it for ``PreemptionRules.protection_s``;
    ``preempted_by`` the gangs that preempted it before, so it never preempts them back (no cycle).
    """

    name: str
    priority: int
    placement: Placement
    start_time: float = 0.0
    checkpoint_time: float | None = None
    preemptible: bool = True
    min_runtime_s: float = 0.0
    preempted_at: float | None = None
    preempted_by: frozenset[str] = frozenset()
    checkpoint_interval_s: float | None = None

    @property
    def gpu_count(self) -> int:
        return self.placement.gpu_count

    def last_checkpoint(self, now: float) -> float:
        """What a restart at ``now`` resumes from: the latest checkpoint by then (the declared one, and after it
        one every ``checkpoint_interval_s`` when the gang declares its interval), else its start."""
        since = self.start_time if self.checkpoint_time is None else max(self.start_time, self.checkpoint_time)
        return resumes_from(since, self.checkpoint_interval_s, now)

    def next_checkpoint(self, now: float) -> float | None:
        """When it next saves its state after ``now``; None when it declares no interval."""
        interval = self.checkpoint_interval_s
        return self.last_checkpoint(now) + interval if interval else None

    def work_lost(self, now: float) -> float:
        """GPU-seconds a preemption at ``now`` throws away: since the last checkpoint, else since the start."""
        return self.gpu_count * max(0.0, now - self.last_checkpoint(now))

    def request(self) -> Request:
        """The gang's shape, to re-place it elsewhere: its workers and the GPUs of its widest worker."""
        widest = max(len(w.gpus) for w in self.placement.workers)
        return Request(len(self.placement.workers), widest, name=self.name, same_model=False)


@dataclass(frozen=True, slots=True)
class Preemptor:
    """A gang that cannot be placed as required, and what it may do about it.

    A gang of several GPU shapes is ``request`` (its first shape), with ``ranks`` its ranks of that request's
    workers and ``label`` their name, and ``more``, its other shapes: each placed in turn in the same domain, as
    ``plan_gang`` places them. Without ``ranks`` the workers are numbered from 0. A gang of exclusive parts
    (``Shape.part``, the first shape's ``part`` and ``exclusive`` here) takes a domain of its exclusive label per
    part instead (``plan_exclusive_preemption``).

    ``checkpoint_wait_s``: how long it may wait, from ``waiting_since`` (when it was queued), for its victims'
    next checkpoint, so they lose only the work since (0: it preempts at once, as an urgent class should).
    """

    request: Request
    priority: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    preempted_by: frozenset[str] = frozenset()  # gangs that preempted it: never its victims (no cycle)
    preempted_at: float | None = None  # when it was last preempted: within the protection it preempts nobody
    more: tuple[Shape, ...] = ()
    ranks: tuple[int, ...] = ()
    label: str = ""
    checkpoint_wait_s: float = 0.0
    waiting_since: float | None = None
    part: str = ""
    exclusive: str = ""

    @classmethod
    def of_shapes(
        cls,
        shapes: tuple[Shape, ...],
        priority: int,
        policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
        preempted_by: frozenset[str] = frozenset(),
        preempted_at: float | None = None,
    ) -> Preemptor:
        """The gang of ``shapes`` (at least one), placed in their order: the first is its ``request``."""
        first, *more = shapes
        return cls(
            first.request,
            priority,
            policy,
            preempted_by,
            preempted_at,
            tuple(more),
            first.ranks,
            first.label,
            part=first.part,
            exclusive=first.exclusive,
        )

    @property
    def name(self) -> str:
        return self.request.name

    def checkpoint_deadline(self, now: float) -> float | None:
        """The latest time it may wait until for its victims' checkpoint (counted from when it was queued, else
        ``now``); None when it may not wait."""
        if self.checkpoint_wait_s <= 0:
            return None
        return (now if self.waiting_since is None else self.waiting_since) + self.checkpoint_wait_s

    @property
    def shapes(self) -> tuple[Shape, ...]:
        """Every shape of the gang, in the order they are placed."""
        ranks = self.ranks or tuple(range(self.request.workers))
        return (Shape(self.request, ranks, self.label, self.part, self.exclusive), *self.more)

    @property
    def exclusive_label(self) -> str:
        """The node label whose domains its exclusive parts take one each; "" when it has no such parts."""
        return next((s.exclusive for s in self.shapes if s.part and s.exclusive), "")

    @property
    def total_gpus(self) -> int:
        return self.request.total_gpus + sum(shape.request.total_gpus for shape in self.more)

    def slots(self) -> Request:
        """The request the search's bounds count slots of: ``request`` itself, or for several shapes the gang's
        GPUs in slots of their greatest common divisor. Every worker takes a whole number of such slots, so a
        domain without enough of them cannot hold the gang, and a bound counted in them stays a lower bound."""
        if not self.more:
            return self.request
        size = math.gcd(*(shape.request.gpus_per_worker for shape in self.shapes))
        return replace(self.request, workers=self.total_gpus // size, gpus_per_worker=size)


@dataclass(frozen=True, slots=True)
class Nomination:
    """GPUs held for a preemptor whose victims are still terminating: no other gang may take them."""

    preemptor: str
    gpus: Mapping[str, frozenset[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, preemptor: str, placement: Placement) -> Nomination:
        return cls(preemptor, gpus_by_node(placement))

    @property
    def gpu_count(self) -> int:
        return sum(len(g) for g in self.gpus.values())


@dataclass(frozen=True, slots=True)
class PreemptionRules:
    """The no-thrash rules and the search's bounds.

    ``protection_s``: a gang preempted is not preempted again this long after, and does not preempt in turn
    (it waits for free GPUs: one arrival does not set off a chain of preemptions down the priorities).
    ``max_victims``: gangs this preemptor may end (a pass passes ``victim_allowance``). ``max_domains``: candidate
    domains whose victim sets are worked out, cheapest bound first. ``near_share`` and ``near_gpu_s``: plans of the
    lowest victim priority whose work lost is within this share of the least, or within this many GPU-seconds
    of it, count as equally cheap, and among them the best bus bandwidth for the preemptor wins (an 8-GPU gang
    on one NVSwitch board instead of two PCIe pairs is worth a few more GPU-minutes lost). ``max_min_runtime_s``:
    the longest minimum runtime a gang may claim for itself (a workload's own word, so bounded by the cluster's).
    """

    now: float = 0.0
    protection_s: float = 300.0
    max_victims: int = 64
    max_domains: int = 24
    near_share: float = 0.2
    near_gpu_s: float = 900.0
    max_min_runtime_s: float = math.inf  # a gang's own minimum runtime counts up to this (the cluster's maximum)


def victim_allowance(per_pass: int, left: int, per_gang: int) -> int:
    """The victims a pass's next preemptor may take: up to ``per_gang``, and more than the ``left`` of the pass's
    budget of ``per_pass`` only as its first preemptor. A bound per pass alone would starve a wide gang whose
    only room is under many small gangs (a 64-tray gang amid 2-tray jobs needs 30 of them): it would wait for
    them to end, however high its priority. The first preemptor spends the budget; the pass ends at most
    ``max(per_pass, per_gang)`` gangs."""
    return per_gang if left >= per_pass else min(left, per_gang)
