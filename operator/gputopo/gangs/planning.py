"""Plan a whole gang from its declaration: the engine's requests for its GPU ranks, on one snapshot.

The engine places a homogeneous gang (``workers`` of ``gpus_per_worker`` GPUs each). A gang of one GPU shape is one
request. A gang of several (a role of 8-GPU ranks and one of 4) is placed a unit at a time on the same snapshot,
each after the earlier ones are reserved, with the first unit's tier as the preferred tier of the rest; under a
required tier every unit goes into one domain of that tier, the best of those that hold them all (a first unit
placed alone could take the only domain where the rest would have fitted). Its estimate is its worst unit's. The
units are placed and combined as ``gputopo.placement.shapes`` does, and the preemption search places a gang's
shapes (``preemptor_shapes``) the same way in the domain it clears.
The parts of an exclusive topology (a JobSet's child Jobs) each take a domain of the label no other part uses; the
preemption search clears one such domain per part (``plan_exclusive_preemption``).
Ranks that ask for no GPU are not planned: nothing holds them, their gate is just lifted.

Planning one gang has a time budget (``out_of_time``, the caller's clock): a gang of many units or exclusive parts
places each unit in turn (each part tried in every free domain of its label), and one declared by a single pod
must not hold the operator's event loop. The budget is checked between the engine's calls; past it the gang is
Unplaceable this pass, saying so, and the next pass tries again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gputopo.errors import GputopoError
from gputopo.gangs.model import NO_CONSTRAINTS, Declared, Gang, GangId, Needs
from gputopo.placement.shapes import Shape, combine, following, ranked
from gputopo.placement.template import PodConstraints
from gputopo.placement.types import (
    GpuChoice,
    Placement,
    Policy,
    Request,
    Snapshot,
    TierConfig,
    Unplaceable,
    WorkerAssignment,
    plural,
)

__all__ = ["GangPlan", "OutOfTime", "Tiers", "Unit", "plan_gang", "preemptor_shapes", "resolve", "units"]

OutOfTime = Callable[[], bool]  # whether the gang's planning budget is spent


def _never() -> bool:
    return False


class _BudgetSpentError(GputopoError):
    """The gang's planning budget is spent (caught in ``plan_gang``)."""


@dataclass(frozen=True, slots=True)
class Tiers:
    """A gang's tiers as indices of this cluster's network tiers."""

    required: int | None = None
    preferred: int | None = None


def resolve(needs: Needs, tiers: TierConfig) -> Tiers | tuple[str, ...]:
    """The gang's required and preferred tier as indices; a tier named by a node label key is that label's
    index among ``tiers.levels``. A label that is no tier, or an index past the top, is a problem naming it."""
    labels = [level.label for level in tiers.levels]
    problems: list[str] = []

    def one(index: int | None, label: str | None, what: str) -> int | None:
        found = index
        if label is not None:
            if label in labels:
                by_label = labels.index(label)
                found = by_label if found is None else min(found, by_label)
            else:
                known = ", ".join(labels) or "none"
                problems.append(f"the {what} names node label {label}, which is no network tier here (tiers: {known})")
        if found is not None and found >= len(labels):
            problems.append(
                f"the {what} {found} names a tier this cluster does not have "
                f"(it has {plural(len(labels), 'network tier')})"
            )
            return None
        return found

    required = one(needs.required_tier, needs.required_label, "required tier")
    preferred = one(needs.preferred_tier, needs.preferred_label, "preferred tier")
    return tuple(problems) if problems else Tiers(required, preferred)


@dataclass(frozen=True, slots=True)
class Unit:
    """GPU ranks placed by one request: one shape, one role, and one part where parts are exclusive."""

    ranks: tuple[int, ...]
    gpus: int
    role: str = ""
    part: str = ""

    def __str__(self) -> str:
        first, last = self.ranks[0], self.ranks[-1]
        span = f"rank {first}" if first == last else f"ranks {first}-{last}"
        name = self.part or self.role
        return f"{span} ({name}, {self.gpus} GPUs each)" if name else f"{span} ({self.gpus} GPUs each)"


def units(declared: Declared, exclusive: bool) -> tuple[Unit, ...]:
    """The gang's GPU ranks grouped into requests, in order of their first rank: one per GPU shape (roles of one
    shape share it), and one per part and shape where parts are exclusive."""
    groups: dict[tuple[str, int], list[int]] = {}
    for rank in declared.gpu_ranks:
        part = declared.parts[rank] if exclusive and rank < len(declared.parts) else ""
        groups.setdefault((part, declared.shape[rank]), []).append(rank)
    out = []
    for (part, gpus), ranks in groups.items():
        roles = dict.fromkeys(declared.roles[r] for r in ranks if r < len(declared.roles) and declared.roles[r])
        out.append(Unit(tuple(ranks), gpus, "+".join(roles), part))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Where each GPU rank of a gang runs. ``placement``'s worker ranks are the gang's ranks; ``parts`` are
    the placements of its units, each with its own estimate."""

    gang: GangId
    placement: Placement
    parts: tuple[Placement, ...] = ()

    @property
    def workers(self) -> tuple[WorkerAssignment, ...]:
        return self.placement.workers

    @property
    def busbw_gbps(self) -> float:
        return self.placement.busbw_gbps

    @property
    def bottleneck(self) -> str:
        return self.placement.bottleneck

    @property
    def tier(self) -> int | None:
        return self.placement.tier

    def of_rank(self, rank: int) -> WorkerAssignment | None:
        return next((w for w in self.placement.workers if w.rank == rank), None)


def _constraints(gang: Gang, unit: Unit) -> PodConstraints:
    """A present member's constraints: one of the unit's ranks, else any GPU member's (members may not all be
    here yet: a JobSet's later Jobs, an LWS group's workers)."""
    by_rank = gang.by_rank
    for rank in (*unit.ranks, *sorted(by_rank)):
        member = by_rank.get(rank)
        if member is not None and member.gpus > 0:
            return member.constraints
    return NO_CONSTRAINTS


def _in_own_domain(
    snapshot: Snapshot, request: Request, label: str, used: set[str], place: Policy, out_of_time: OutOfTime = _never
) -> tuple[str, Placement] | Unplaceable:
    """The best placement inside one domain of ``label`` that no other part of the gang uses."""
    values = sorted({n.labels[label] for n in snapshot if label in n.labels} - used)
    best: tuple[str, Placement] | None = None
    first: Unplaceable | None = None
    for value in values:
        if out_of_time():
            raise _BudgetSpentError
        found = place(snapshot, replace(request, node_selector={**request.node_selector, label: value}))
        if isinstance(found, Unplaceable):
            first = first or found
        elif best is None or found.busbw_gbps > best[1].busbw_gbps:
            best = (value, found)
    if best is not None:
        return best
    tried = (
        f"none of {plural(len(values), 'free domain')} of {label} fits it" if values else f"no free domain of {label}"
    )
    return Unplaceable(tried, (str(first),) if first else ())


def _combined(snapshot: Snapshot, gang: GangId, placed: list[tuple[Unit, Placement]]) -> GangPlan:
    placement = combine(snapshot, [(str(unit), p) for unit, p in placed])
    return GangPlan(gang, placement, tuple(p for _, p in placed))


def _request(gang: Gang, unit: Unit, resolved: Tiers, gpu_choice: GpuChoice) -> Request:
    """The engine's request for one unit: its ranks and shape, with the gang's needs and a member's constraints."""
    needs = gang.needs
    pod = _constraints(gang, unit)
    return Request(
        workers=len(unit.ranks),
        gpus_per_worker=unit.gpus,
        name=f"{gang.id}",
        intra_node=needs.intra_node,
        min_busbw_gbps=needs.min_busbw_gbps,
        required_tier=resolved.required,
        preferred_tier=resolved.preferred,
        node_selector=pod.node_selector,
        affinity_terms=pod.affinity_terms,
        tolerations=pod.tolerations,
        slice_size=needs.slice_size,
        gpu_choice=gpu_choice,
    )


def _place_units(
    snapshot: Snapshot,
    gang: Gang,
    planned: tuple[Unit, ...],
    resolved: Tiers,
    place: Policy,
    gpu_choice: GpuChoice,
    out_of_time: OutOfTime = _never,
) -> list[tuple[Unit, Placement]] | Unplaceable:
    exclusive = gang.needs.exclusive_label
    current = snapshot
    placed: list[tuple[Unit, Placement]] = []
    used: set[str] = set()
    for unit in planned:
        if out_of_time():
            raise _BudgetSpentError
        request = following(_request(gang, unit, resolved, gpu_choice), [p for _, p in placed])
        if exclusive is not None and unit.part:
            found = _in_own_domain(current, request, exclusive, used, place, out_of_time)
            if isinstance(found, Unplaceable):
                return Unplaceable(f"{unit}: {found.reason}", found.details)
            domain, result = found
            used.add(domain)
        else:
            outcome = place(current, request)
            if isinstance(outcome, Unplaceable):
                return Unplaceable(f"{unit}: {outcome.reason}", outcome.details)
            result = outcome
        result = ranked(result, unit.ranks)
        current = current.reserve(result)
        placed.append((unit, result))
    return placed


def _domain_parts(snapshot: Snapshot, tier: int, gpus: int) -> list[Snapshot]:
    """The snapshot cut into its domains at ``tier`` that have ``gpus`` free GPUs, most free first."""
    members: dict[str, list[int]] = {}
    for i, domains in enumerate(snapshot.domains):
        members.setdefault(domains[tier], []).append(i)
    free = {d: sum(len(snapshot.nodes[i].free_gpus) for i in nodes) for d, nodes in members.items()}
    order = sorted((d for d in members if free[d] >= gpus), key=lambda d: (-free[d], d))
    return [snapshot.part(members[d]) for d in order]


def preemptor_shapes(
    gang: Gang, tiers: TierConfig, gpu_choice: GpuChoice = GpuChoice.PLANNED
) -> tuple[Shape, ...] | None:
    """The gang as the preemption search places it: one request per GPU shape, with the gang's ranks of it, all
    placed in turn in the one domain its victims clear (as ``plan_gang`` places them). A gang of exclusive parts
    has one request per part and shape, each naming its part and the exclusive label (``Shape.part``,
    ``Shape.exclusive``): the search gives each part a domain of that label of its own. None for a gang that
    cannot be planned."""
    if gang.problems or gang.declared is None:
        return None
    resolved = resolve(gang.needs, tiers)
    if isinstance(resolved, tuple):
        return None
    label = gang.needs.exclusive_label or ""
    planned = units(gang.declared, bool(label))
    if not planned:
        return None
    return tuple(
        Shape(_request(gang, unit, resolved, gpu_choice), unit.ranks, str(unit), unit.part, label if unit.part else "")
        for unit in planned
    )


def plan_gang(
    snapshot: Snapshot,
    gang: Gang,
    tiers: TierConfig,
    place: Policy,
    gpu_choice: GpuChoice = GpuChoice.PLANNED,
    out_of_time: OutOfTime = _never,
) -> GangPlan | Unplaceable:
    """Place every GPU rank the gang declares, or none; the refusal names the unit that did not fit. Past its
    budget (``out_of_time``, checked between the engine's calls) the gang is Unplaceable, saying so."""
    try:
        return _plan_gang(snapshot, gang, tiers, place, gpu_choice, out_of_time)
    except _BudgetSpentError:
        declared = gang.declared
        assert declared is not None
        planned = units(declared, gang.needs.exclusive_label is not None)
        return Unplaceable(
            f"planning its {plural(len(declared.gpu_ranks), 'GPU rank')} ({plural(len(planned), 'request')}) took "
            "longer than one gang may take in a pass: it is tried again in the next"
        )


def _plan_gang(
    snapshot: Snapshot, gang: Gang, tiers: TierConfig, place: Policy, gpu_choice: GpuChoice, out_of_time: OutOfTime
) -> GangPlan | Unplaceable:
    if gang.problems:
        return Unplaceable(gang.problems[0], gang.problems[1:])
    if gang.declared is None:
        return Unplaceable("the gang's size is not known yet: its owner has not been read")
    resolved = resolve(gang.needs, tiers)
    if isinstance(resolved, tuple):
        return Unplaceable(resolved[0], resolved[1:])
    planned = units(gang.declared, gang.needs.exclusive_label is not None)
    if resolved.required is None or len(planned) < 2:
        placed = _place_units(snapshot, gang, planned, resolved, place, gpu_choice, out_of_time)
        return placed if isinstance(placed, Unplaceable) else _combined(snapshot, gang.id, placed)
    # Several units under a required tier: the whole gang in one domain of it, the best domain that holds it.
    total = sum(len(u.ranks) * u.gpus for u in planned)
    best: list[tuple[Unit, Placement]] | None = None
    refusal: Unplaceable | None = None
    for part in _domain_parts(snapshot, resolved.required, total):
        if best is not None and out_of_time():
            break  # the best domain so far will do
        found = _place_units(part, gang, planned, resolved, place, gpu_choice, out_of_time)
        if isinstance(found, Unplaceable):
            refusal = refusal or found
        elif best is None or min(p.busbw_gbps for _, p in found) > min(p.busbw_gbps for _, p in best):
            best = found
    if best is not None:
        return _combined(snapshot, gang.id, best)
    if refusal is not None:
        return refusal
    return Unplaceable(f"no domain of tier {resolved.required} has the gang's {plural(total, 'free GPU')}")
