"""Preemption in a pass (pure): nominations held, victims of recorded nominations ended, new preemptions decided.

A preemption happens in two steps, each level-triggered from what the cluster shows:

1. **Decided.** A gang the queue could not place, whose priority class lets it preempt, gets the victims
   ``plan_preemption`` chooses; the pass records only the **nomination** in the preemptor's status (the GPUs held
   for it and the victims named). Nothing is ended yet. A gang whose class lets it wait
   (``gputopo.io/checkpoint-wait-seconds``) for victims that declare their checkpoint interval may instead be told
   to come back at their next checkpoint (a ``NoPreemption`` with ``retry_at``): it records nothing but why it
   waits, and a pass runs again then.
2. **Carried out.** A pass that reads a nomination ends each victim it names that still holds its plan (a
   TrainingJob's pods deleted with its grace period, a foreign gang's pods evicted), and holds the nominated GPUs
   for the preemptor alone until it is placed.

So an operator killed between the two finds the nomination and finishes it, and one killed before the
nomination is written has ended nobody. A nomination lapses when its GPUs can no longer hold the preemptor
(a node gone, cordoned or failed under them); it is cleared when the preemptor is placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gputopo.api.preemption import NodeGpus, NominationStatus
from gputopo.control.facts import JobKey
from gputopo.placement.preemption import (
    Nomination,
    NoPreemption,
    PreemptionPlan,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    RunningGang,
    RunningIndex,
    plan_preemption,
    victim_allowance,
)
from gputopo.placement.preemption.nominations import Pending, free_nominated, lapsed_nominations
from gputopo.placement.shapes import Shape
from gputopo.placement.types import Placement, Request, Snapshot

__all__ = [
    "Decision",
    "Holder",
    "PreemptionSettings",
    "Wanting",
    "decide",
    "gang_name",
    "hold",
    "lapsed",
    "may_preempt",
    "nomination_of",
    "nomination_status",
]


@dataclass(frozen=True, slots=True)
class PreemptionSettings:
    """``protection_seconds``: a gang preempted is not preempted again this long after; ``max_victims_per_pass``:
    the gangs one pass may preempt; ``max_victims_per_gang``: the gangs one preemptor may end, more than the pass's
    budget only as the pass's first preemptor (a wide gang needing many small victims is served, not starved by
    the pass's bound; it spends the pass's budget); ``max_domains``: candidate domains searched per preemptor.
    ``max_min_runtime_seconds``: the longest minimum runtime a workload may claim for itself (its own word: a tenant
    does not keep its GPUs for ever). ``preemptors``: which PriorityClasses may preempt, and in which namespaces
    (class name to namespaces, ``*`` for every one); empty, every class whose ``preemptionPolicy`` allows it,
    everywhere (``may_preempt``)."""

    enabled: bool = True
    protection_seconds: float = 300.0
    max_victims_per_pass: int = 16
    max_domains: int = 24
    max_victims_per_gang: int = 64
    max_min_runtime_seconds: float = 3600.0
    preemptors: Mapping[str, frozenset[str]] = field(default_factory=dict)


def may_preempt(settings: PreemptionSettings, priority_class: str, namespace: str) -> bool:
    """Whether a gang of ``priority_class`` ("" when it names none) in ``namespace`` may preempt, as the operator's
    ``preemptors`` list says: with a list, only a class it names, in a namespace it names for that class."""
    if not settings.preemptors:
        return True
    namespaces = settings.preemptors.get(priority_class) if priority_class else None
    return namespaces is not None and ("*" in namespaces or namespace in namespaces)


def gang_name(key: JobKey) -> str:
    """How a nomination names a gang: ``<namespace>/<name>`` for a TrainingJob, ``<namespace>/<source>/<name>``
    for a foreign gang (whose key's name is ``<source>/<name>``)."""
    return f"{key[0]}/{key[1]}"


@dataclass(frozen=True, slots=True)
class Holder:
    """A gang that holds GPUs now, as preemption sees it."""

    key: JobKey
    running: RunningGang


@dataclass(frozen=True, slots=True)
class Wanting:
    """A gang the queue could not place this pass, and what it may do about it."""

    key: JobKey
    request: Request
    priority: int
    policy: PreemptionPolicy
    preempted_by: frozenset[str] = frozenset()
    preempted_at: float | None = None  # when it was last preempted (seconds): it preempts nobody while protected
    shapes: tuple[Shape, ...] = ()  # a foreign gang by GPU shape, with its ranks (``request`` is the first's)
    checkpoint_wait_s: float = 0.0  # its class's: how long it may wait for its victims' next checkpoint
    waiting_since: float | None = None  # when it was queued (seconds): the wait counts from then


@dataclass(frozen=True, slots=True)
class Decision:
    preemptor: JobKey
    plan: PreemptionPlan
    victims: tuple[JobKey, ...]


def nomination_of(key: JobKey, status: NominationStatus | None) -> Nomination | None:
    if status is None or not status.gpus:
        return None
    gpus: dict[str, frozenset[int]] = {}
    for entry in status.gpus:
        gpus[entry.node] = gpus.get(entry.node, frozenset()) | frozenset(entry.gpus)
    return Nomination(gang_name(key), gpus)


def nomination_status(plan: PreemptionPlan, now: datetime) -> NominationStatus:
    return NominationStatus(
        gpus=[NodeGpus(node=node, gpus=sorted(g)) for node, g in sorted(plan.nomination.gpus.items())],
        victims=sorted(v.name for v in plan.victims),
        domain=plan.domain.name,
        since=now,
    )


def hold(snapshot: Snapshot, nominations: Mapping[JobKey, Nomination]) -> tuple[Snapshot, dict[JobKey, Placement]]:
    """The snapshot with every nomination's free GPUs taken, and per preemptor what was taken for it (its own
    view releases that). GPUs a victim still holds are taken already; nominations never overlap, and where
    they do, the first (by preemptor) holds the GPU."""
    held: dict[JobKey, Placement] = {}
    for key in sorted(nominations):
        placement = free_nominated(snapshot, nominations[key].gpus)
        if placement is not None:
            snapshot = snapshot.reserve(placement)
            held[key] = placement
    return snapshot, held


def lapsed(
    snapshot: Snapshot, nominations: Mapping[JobKey, Nomination], pending: Mapping[JobKey, Pending]
) -> dict[JobKey, str]:
    """The nominations of ``pending`` preemptors (stepped this pass, waiting for a plan) whose GPUs no longer
    hold them, with why. A preemptor not stepped this pass (its writes still going out) keeps its nomination."""
    by_name = {gang_name(k): k for k in nominations}
    mine = [n for k, n in nominations.items() if k in pending]
    found = lapsed_nominations(snapshot, mine, {gang_name(k): r for k, r in pending.items()})
    return {by_name[name]: why for name, why in found.items()}


def _preemptor(want: Wanting, name: str) -> Preemptor:
    """The gang as ``plan_preemption`` reads it, named as nominations name it; a gang of several GPU shapes with
    every shape."""
    mine = (want.priority, want.policy, want.preempted_by, want.preempted_at)
    if not want.shapes:
        found = Preemptor(replace(want.request, name=name), *mine)
    else:
        named = tuple(replace(s, request=replace(s.request, name=name)) for s in want.shapes)
        found = Preemptor.of_shapes(named, *mine)
    return replace(found, checkpoint_wait_s=want.checkpoint_wait_s, waiting_since=want.waiting_since)


@dataclass
class _Budget:
    victims: int
    decisions: list[Decision] = field(default_factory=list)


def decide(
    snapshot: Snapshot,
    wanting: Sequence[Wanting],
    holders: Iterable[Holder],
    nominations: Mapping[JobKey, Nomination],
    settings: PreemptionSettings,
    now: float,
) -> tuple[list[Decision], dict[JobKey, NoPreemption]]:
    """For each gang in ``wanting`` (in queue order) that may preempt and holds no nomination, the cheapest
    victims by topology, within the pass's victim budget; later preemptors of the pass see the victims of earlier
    ones gone and their nominations held. The pass's first preemptor may take up to ``max_victims_per_gang``
    victims even beyond the pass's budget; the others what is left of it. Returns the decisions, and why no
    preemption helped the others, among them those told to wait for their victims' next checkpoint (``retry_at``):
    a gang that waits holds nothing."""
    budget = _Budget(settings.max_victims_per_pass)
    refused: dict[JobKey, NoPreemption] = {}
    running = {h.running.name: h for h in holders}
    held = dict(nominations)
    index: RunningIndex | None = None
    for want in wanting:
        if budget.victims <= 0:
            break
        if want.policy is PreemptionPolicy.NEVER or want.key in held:
            continue
        if not any(h.running.priority < want.priority for h in running.values()):
            continue  # nothing of lower priority runs: no search
        if index is None:
            index = RunningIndex(snapshot, (h.running for h in running.values()), held.values())
        preemptor = _preemptor(want, gang_name(want.key))
        rules = PreemptionRules(
            now=now,
            protection_s=settings.protection_seconds,
            max_victims=victim_allowance(settings.max_victims_per_pass, budget.victims, settings.max_victims_per_gang),
            max_domains=settings.max_domains,
            max_min_runtime_s=settings.max_min_runtime_seconds,
        )
        result = plan_preemption(index, preemptor, rules=rules)
        if isinstance(result, NoPreemption):
            refused[want.key] = result
            continue
        victims = tuple(running[v.name].key for v in result.victims)
        budget.decisions.append(Decision(want.key, result, victims))
        budget.victims -= len(victims)
        for victim in result.victims:
            running.pop(victim.name, None)
        held[want.key] = result.nomination
        index = None  # the next preemptor sees these victims gone and this nomination held
    return budget.decisions, refused
