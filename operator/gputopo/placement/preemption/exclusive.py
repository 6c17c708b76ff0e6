"""A gang of exclusive parts preempts: each part in a domain of the exclusive label that no other part uses.

A JobSet with exclusive topology (``alpha.jobset.sigs.k8s.io/exclusive-topology: <label>``, on the JobSet or on one
of its replicated Jobs) puts each child Job in a domain of a node label (a node pool, a rack) that no other Job of
the set uses: ``Shape.part`` names each shape's part and ``Shape.exclusive`` the label. Its room is several domains
cleared together, one per part, where ``plan_preemption`` clears one. ``plan_exclusive_preemption`` plans it part by
part, in the gang's order (the order ``plan_gang`` places them):

1. The label's domains are its values, each the nodes that carry it (a node without the label is never used); a
   part takes one that no earlier part took.
2. A part that fits with the GPUs free in one of them costs nothing: the one with the best bus bandwidth is taken,
   as ``plan_gang`` takes it.
3. Else ``plan_preemption`` searches each domain whose free and preemptible GPUs could hold the part, the part's
   requests confined to it by a node selector on the label's value; domains are searched lowest bound on their
   victims' priority first, at most ``max_domains`` of them, and a domain whose bound is above the lowest victim
   priority found is not searched. The cheapest plan wins as in ``plan_preemption``: the lowest victim priority,
   then among the plans within ``near_share`` (or ``near_gpu_s``) of the least work, the best bus bandwidth.
4. The next part sees the cluster as the earlier ones leave it: their victims gone (their GPUs free, never a victim
   twice), their placements taken, their domains used, and what is left of ``max_victims``.

Ranks outside every part (a replicated Job without the annotation beside exclusive ones) go wherever
``plan_preemption`` finds them room, on the same cluster, as ``plan_gang`` places them anywhere. The parts' plans
make one ``PreemptionPlan``: the victims of every part (whole gangs, each once), every rank's placement (its estimate
the worst part's), the cost combined (the highest victim priority and the worst fragmentation of any part; work
lost, GPUs waiting and gangs broken added up) and a ``Domain`` of level ``exclusive`` naming the label's values taken.
The rules ``plan_preemption`` keeps hold for the gang as a whole: a preemptor whose policy is Never, that holds a
nomination or that was preempted within the protection time preempts nobody; ``max_victims`` bounds every part's
victims together; a preemptor that may wait for its victims' checkpoint (``checkpoint_wait_s``) is told to, for
all of them together.

**Greedy.** A part never gives its domain back for a later one: a first part may take the one domain a later,
larger part needed while another would have done for it; that later part then finds nothing and the gang preempts
nobody (it waits for free GPUs, as it did before it could preempt at all). The best assignment of parts to domains
is an assignment problem whose costs depend on one another (a victim in two domains frees GPUs in both, a part's
victims may make room for the next), so it would cost a search over the parts' orders for what is most often
nothing: a JobSet's parts are mostly one replicated Job's Jobs, all alike, where the order changes no cost. Greedy
costs at most ``max_domains`` calls of ``plan_preemption`` per part.

**The nomination holds the gang as ``plan_gang`` will place it.** Once the victims end the gang is planned again by
``plan_gang`` on its nominated GPUs, and a nomination on which that finds nothing lapses once its victims are ended.
So before a plan is given it is checked the way ``plan_gang`` places the gang on those GPUs alone (each part in
turn in the best domain left): parts of different sizes may take each other's domains there. A plan that fails the
check, or whose parts would span more than the one domain of a required tier that ``plan_gang`` puts a gang of
several units in, is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gputopo.placement.engine import place
from gputopo.placement.preemption.bounds import NO_LEVEL
from gputopo.placement.preemption.domains import Domain
from gputopo.placement.preemption.eligibility import Eligible
from gputopo.placement.preemption.gangs import Nomination, PreemptionRules, Preemptor, RunningGang
from gputopo.placement.preemption.index import RunningIndex
from gputopo.placement.preemption.nominations import nominated_only
from gputopo.placement.preemption.victims import (
    NoPreemption,
    PreemptionCost,
    PreemptionPlan,
    checkpoint_wait,
    plan_preemption,
    preemption_refusal,
)
from gputopo.placement.shapes import Shape, combine, place_shapes
from gputopo.placement.types import Placement, Snapshot

__all__ = ["EXCLUSIVE", "exclusive_parts", "plan_exclusive_preemption"]

EXCLUSIVE = "exclusive"  # the level of the Domain a gang of exclusive parts clears: several domains of its label

_NO_VICTIM = -(2**62)
_FREE = PreemptionCost(_NO_VICTIM, 0.0, 0, 0, 0.0)


@dataclass(frozen=True, slots=True)
class _Part:
    """One part's plan: the label's value it took ("" for ranks outside every part), and how."""

    name: str
    value: str
    plan: PreemptionPlan
    nodes: tuple[int, ...]  # the snapshot indices of its domain's nodes


def exclusive_parts(preemptor: Preemptor) -> list[tuple[str, tuple[Shape, ...]]]:
    """The preemptor's shapes by part, parts in the order of their first shape ("" gathers the ranks outside every
    part)."""
    parts: dict[str, list[Shape]] = {}
    for shape in preemptor.shapes:
        parts.setdefault(shape.part if shape.exclusive else "", []).append(shape)
    return [(name, tuple(shapes)) for name, shapes in parts.items()]


def _confined(shapes: Sequence[Shape], label: str, value: str) -> tuple[Shape, ...]:
    """The shapes as plain shapes, confined to the nodes whose ``label`` is ``value`` (none when ``label`` is "")."""
    out = []
    for shape in shapes:
        request = shape.request
        if label:
            request = replace(request, node_selector={**request.node_selector, label: value})
        out.append(replace(shape, request=request, part="", exclusive=""))
    return tuple(out)


def _values(snapshot: Snapshot, label: str) -> dict[str, tuple[int, ...]]:
    """The label's domains: per value, the indices of the nodes that carry it."""
    out: dict[str, list[int]] = {}
    for i, node in enumerate(snapshot.nodes):
        value = node.labels.get(label)
        if value is not None:
            out.setdefault(value, []).append(i)
    return {value: tuple(nodes) for value, nodes in sorted(out.items())}


def _level(index: RunningIndex, eligible: Eligible, nodes: Iterable[int], need: int) -> int | None:
    """A lower bound on the highest victim priority of any plan in the domain of ``nodes``, by GPU counts alone
    (``NO_LEVEL`` when its free GPUs could suffice); None when even every possible victim leaves too few."""
    ok = set(eligible.indices)
    free = 0
    victims: list[tuple[int, int]] = []
    for i in nodes:
        free += index.free[i]
        victims += [(index.running[k].priority, len(gpus)) for k, gpus in index.on_node.get(i, ()) if k in ok]
    if free >= need:
        return NO_LEVEL
    for priority, gpus in sorted(victims):
        free += gpus
        if free >= need:
            return priority
    return None


def _cheapest(found: list[_Part], rules: PreemptionRules) -> _Part:
    """As ``plan_preemption`` chooses: the lowest victim priority, then among the plans whose work lost is within
    ``near_share`` (or ``near_gpu_s``) of the least, the best bus bandwidth, then the cost."""
    lowest = min(f.plan.cost.highest_priority for f in found)
    least = min(f.plan.cost.work_lost_gpu_s for f in found if f.plan.cost.highest_priority == lowest)
    limit = least * (1 + rules.near_share) + rules.near_gpu_s
    near = [f for f in found if f.plan.cost.highest_priority == lowest and f.plan.cost.work_lost_gpu_s <= limit]
    return min(near, key=lambda f: (-round(f.plan.placement.busbw_gbps, 6), f.plan.cost, f.value))


def _free(snapshot: Snapshot, name: str, shapes: Sequence[Shape]) -> PreemptionPlan | None:
    """The shapes placed with the GPUs free now, as a plan without victims; None when they do not fit."""
    found = place_shapes(snapshot, shapes, place)
    if not isinstance(found, Placement):
        return None
    return PreemptionPlan(name, (), Domain(EXCLUSIVE, "", (), 0), found, _FREE)


def _part(
    index: RunningIndex,
    preemptor: Preemptor,
    name: str,
    shapes: tuple[Shape, ...],
    taken: set[str],
    rules: PreemptionRules,
) -> _Part | NoPreemption:
    """The cheapest way to hold one part on the cluster of ``index``, in a domain of its label not ``taken``."""
    label = preemptor.exclusive_label if name else ""
    mine = (preemptor.priority, preemptor.policy, preemptor.preempted_by, preemptor.preempted_at)
    named = f"part {name}" if name else "its ranks outside every part"
    if not label:  # ranks outside every part: anywhere, as plan_gang places them
        free = _free(index.snapshot, preemptor.name, shapes)
        if free is not None:
            return _Part(name, "", free, ())
        anywhere = plan_preemption(index, Preemptor.of_shapes(_confined(shapes, "", ""), *mine), rules=rules)
        if isinstance(anywhere, NoPreemption):
            return NoPreemption(f"{named}: {anywhere.reason}", anywhere.details)
        return _Part(name, "", anywhere, anywhere.domain.nodes)
    domains = _values(index.snapshot, label)
    left = {value: nodes for value, nodes in domains.items() if value not in taken}
    if not domains:
        return NoPreemption(f"{named}: no node carries label {label}")
    if not left:
        return NoPreemption(
            f"{named}: no domain of {label} is left for it: the other parts take all {len(domains)} "
            f"({', '.join(domains)})"
        )
    need = sum(shape.request.total_gpus for shape in shapes)
    fits = [
        _Part(name, value, room, nodes)
        for value, nodes in left.items()
        if sum(index.free[i] for i in nodes) >= need
        and (room := _free(index.snapshot, preemptor.name, _confined(shapes, label, value))) is not None
    ]
    if fits:
        return max(fits, key=lambda f: f.plan.placement.busbw_gbps)  # the first of the best, as plan_gang takes it
    probe = Preemptor.of_shapes(_confined(shapes, label, next(iter(left))), *mine)
    eligible = Eligible(index.running, probe, rules)
    bounded = [(level, value) for value in left if (level := _level(index, eligible, left[value], need)) is not None]
    if not bounded:
        why = "no domain holds it even with every lower-priority gang preempted"
        if not eligible.indices:
            why = "no running gang may be preempted for it"
        return NoPreemption(f"{named}: {why} (domains of {label} left: {', '.join(left)})", eligible.describe())
    bounded.sort(key=lambda b: (b[0], -sum(index.free[i] for i in left[b[1]]), b[1]))
    found: list[_Part] = []
    refusal: NoPreemption | None = None
    searched: list[str] = []
    for level, value in bounded[: rules.max_domains]:
        if found and level > min(f.plan.cost.highest_priority for f in found):
            break  # every plan there has victims of higher priority than one found
        searched.append(value)
        wanted = Preemptor.of_shapes(_confined(shapes, label, value), *mine)
        result = plan_preemption(index, wanted, rules=rules)
        if isinstance(result, NoPreemption):
            refusal = refusal or result
        else:
            found.append(_Part(name, value, result, left[value]))
    if not found:
        assert refusal is not None
        where = f"{label} {', '.join(searched)}"
        return NoPreemption(f"{named}: in each domain of {where}: {refusal.reason}", refusal.details)
    return _cheapest(found, rules)


def _after(index: RunningIndex, victims: Sequence[RunningGang], placement: Placement) -> RunningIndex:
    """The cluster as a part leaves it: its victims gone, their GPUs free, its placement taken."""
    snapshot = index.snapshot
    for victim in victims:
        workers = tuple(w for w in victim.placement.workers if w.node in snapshot)
        snapshot = snapshot.release(replace(victim.placement, workers=workers))
    snapshot = snapshot.reserve(placement)
    gone = {v.name for v in victims}
    return RunningIndex(snapshot, (g for g in index.running if g.name not in gone), index.nominations)


def _holds(snapshot: Snapshot, preemptor: Preemptor, placement: Placement) -> str | None:
    """Why ``plan_gang`` would not place the gang on the placement's GPUs alone (each part in turn in the best
    domain of its label left, as it places it); None when it would."""
    label = preemptor.exclusive_label
    current = nominated_only(snapshot, Nomination.of(preemptor.name, placement))
    taken: set[str] = set()
    for name, shapes in exclusive_parts(preemptor):
        if not name:
            found = place_shapes(current, _confined(shapes, "", ""), place)
        else:
            best: tuple[str, Placement] | None = None
            for value in _values(current, label):
                if value in taken:
                    continue
                one = place_shapes(current, _confined(shapes, label, value), place)
                if isinstance(one, Placement) and (best is None or one.busbw_gbps > best[1].busbw_gbps):
                    best = (value, one)
            if best is None:
                return f"part {name} would find no domain of {label} left on the nominated GPUs"
            taken.add(best[0])
            found = best[1]
        if not isinstance(found, Placement):
            return "its ranks outside every part would not fit on the nominated GPUs"
        current = current.reserve(found)
    return None


def plan_exclusive_preemption(
    snapshot: Snapshot | RunningIndex,
    preemptor: Preemptor,
    running: Iterable[RunningGang] = (),
    rules: PreemptionRules = PreemptionRules(),
    nominations: Iterable[Nomination] = (),
) -> PreemptionPlan | NoPreemption:
    """The victims that make room for every exclusive part of the preemptor, each part in a domain of its label that
    no other part uses, and its placement; or why none does, naming the part. ``plan_preemption`` calls it for a
    preemptor of exclusive parts; the arguments are its own."""
    index = snapshot if isinstance(snapshot, RunningIndex) else RunningIndex(snapshot, running, nominations)
    refused = preemption_refusal(index, preemptor, rules)
    if refused is not None:
        return refused
    base = index.snapshot
    current = index
    taken: set[str] = set()
    parts: list[_Part] = []
    victims: list[RunningGang] = []
    for name, shapes in exclusive_parts(preemptor):
        budget = replace(rules, max_victims=rules.max_victims - len(victims))
        found = _part(current, preemptor, name, shapes, taken, budget)
        if isinstance(found, NoPreemption):
            return found
        parts.append(found)
        if name:
            taken.add(found.value)
        victims += found.plan.victims
        current = _after(current, found.plan.victims, found.plan.placement)
    placement = combine(
        base, [(f"part {p.name}" if p.name else "ranks outside every part", p.plan.placement) for p in parts]
    )
    label = preemptor.exclusive_label
    why = _holds(base, preemptor, placement)
    required = [s.request.required_tier for s in preemptor.shapes if s.request.required_tier is not None]
    if (
        why is None
        and required
        and len(preemptor.shapes) > 1
        and (placement.tier is None or placement.tier > min(required))
    ):
        why = f"its parts take domains of {label} under more than one domain of tier {min(required)}, which it requires"
    if why is not None:
        return NoPreemption(f"the domains of {label} found one part at a time do not hold it: {why}")
    chosen = tuple(sorted(victims, key=lambda v: v.name))
    wait = checkpoint_wait(chosen, preemptor, rules)
    if wait is not None:
        return wait
    costs = [p.plan.cost for p in parts]
    cost = PreemptionCost(
        max(c.highest_priority for c in costs),
        sum(c.work_lost_gpu_s for c in costs),
        sum(c.gpus_waiting for c in costs),
        len(chosen),
        max(c.fragmentation for c in costs),
    )
    values = [f"{label}={p.value}" for p in parts if p.name]
    nodes = tuple(sorted({i for p in parts for i in p.nodes}))
    domain = Domain(EXCLUSIVE, ", ".join(values), nodes, max(p.plan.domain.rank for p in parts))
    moves = tuple(move for p in parts for move in p.plan.moves)
    searched = sum(p.plan.domains_searched for p in parts)
    return PreemptionPlan(preemptor.name, chosen, domain, placement, cost, moves, searched)
