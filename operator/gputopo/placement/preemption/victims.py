"""Victims chosen by topology: ``plan_preemption(snapshot, preemptor, running, rules, nominations)``.

For a gang the engine cannot place as required, each candidate domain (a node, an NVLink domain, a switch of
each tier, last the whole cluster) gets the cheapest set of whole lower-priority gangs whose removal lets
the engine place the gang there, checked by calling ``place`` on the domain's nodes with those gangs' GPUs
freed:

1. Bound: a domain whose free GPUs plus preemptible GPUs cannot hold the gang is skipped; the others are
   searched cheapest lower bound first (the lowest priority that frees enough GPUs, and the work lost by a
   fractional fill), and the search stops at a domain whose bound is dearer than the best plan found, or
   after ``PreemptionRules.max_domains`` domains.
2. Greedy: victims are added lowest priority first, then least work lost per GPU freed in the domain, then
   largest, until the gang places; then a minimality pass drops, dearest first, every victim without which
   it still places. No subset enumeration: the engine is called O(victims) times per domain.
3. Cost, compared in order: the highest priority among the victims, the work they lose (GPU-seconds since
   their checkpoint or start; a victim that can be re-placed at once elsewhere at no worse bus bandwidth
   counts ``moved_work_share`` of it), the number of gangs broken, the fragmentation left in the domain.
   Among the cheapest, the domain giving the preemptor the best bus bandwidth wins.

The whole cluster is searched only when no smaller domain holds the gang, since one engine call there costs
as much as every switch's together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from gputopo.placement.engine import place
from gputopo.placement.filters import node_rejection
from gputopo.placement.preemption.domains import CLUSTER, Domain, candidate_domains
from gputopo.placement.preemption.eligibility import Eligible
from gputopo.placement.preemption.gangs import (
    Nomination,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    RunningGang,
    gpus_by_node,
)
from gputopo.placement.preemption.nominations import hold_nominations
from gputopo.placement.types import NodeInfo, Placement, Snapshot

__all__ = ["NoPreemption", "PreemptionCost", "PreemptionPlan", "plan_preemption"]

_NO_VICTIM = -(2**62)


class PreemptionCost(NamedTuple):
    """Compared field by field, lower is cheaper."""

    highest_priority: int  # of the victims; far below any priority when there are none
    work_lost_gpu_s: float  # rounded to a GPU-second so float noise does not decide
    gangs_broken: int
    fragmentation: float  # share of the domain's free GPUs left on partly used nodes


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """The victims to end, the domain cleared, the preemptor's placement there, and the victims that can be
    re-placed at once (``moves``, at no worse bus bandwidth)."""

    preemptor: str
    victims: tuple[RunningGang, ...]
    domain: Domain
    placement: Placement
    cost: PreemptionCost
    moves: tuple[tuple[str, Placement], ...] = ()
    domains_searched: int = 0

    @property
    def nomination(self) -> Nomination:
        """The GPUs to hold for the preemptor while its victims terminate."""
        return Nomination.of(self.preemptor, self.placement)

    @property
    def victim_gpus(self) -> int:
        return sum(v.gpu_count for v in self.victims)


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """Why no preemption helps, in words a user can act on."""

    reason: str
    details: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.reason if not self.details else f"{self.reason} ({'; '.join(self.details)})"


@dataclass(frozen=True, slots=True)
class _Found:
    victims: tuple[int, ...]
    placement: Placement
    cost: PreemptionCost
    domain: Domain
    moves: tuple[tuple[str, Placement], ...]


class _Search:
    """One decision's state: the held snapshot, the possible victims and their GPUs per node."""

    def __init__(
        self,
        snapshot: Snapshot,
        preemptor: Preemptor,
        victims: Sequence[RunningGang],
        rules: PreemptionRules,
        held: Mapping[str, frozenset[int]],
    ) -> None:
        self.snapshot = snapshot
        self.preemptor = preemptor
        self.request = preemptor.request
        self.rules = rules
        self.victims = victims
        self.work = [v.work_lost(rules.now) for v in victims]
        # Per node index: (victim, its GPUs there that its end frees: not those nominated to another gang).
        self.on_node: dict[int, list[tuple[int, frozenset[int]]]] = {}
        for k, gang in enumerate(victims):
            for node, gpus in gpus_by_node(gang.placement).items():
                freeable = gpus - held.get(node, frozenset())
                if node in snapshot and freeable:
                    self.on_node.setdefault(snapshot.index_of(node), []).append((k, freeable))
        request = self.request
        plain = not (request.node_selector or request.affinity_terms or request.gpu_model or request.tolerations)
        self.passes: dict[int, int] = {}  # node index -> its free GPUs, for nodes that may take a worker
        for i, info in enumerate(snapshot.nodes):
            free = info.topology.gpu_count - len(info.used_gpus)
            if free <= 0 and i not in self.on_node:
                continue
            if (plain and info.ready and info.schedulable and not info.taints) or node_rejection(info, request) is None:
                self.passes[i] = max(0, free)
        self.engine_calls = 0

    # -- bounds -----------------------------------------------------------------------------------------------

    def in_domain(self, domain: Domain) -> dict[int, int]:
        """Possible victims with GPUs in the domain, and how many of their GPUs are there."""
        counts: dict[int, int] = {}
        for i in domain.nodes:
            for k, gpus in self.on_node.get(i, ()):
                counts[k] = counts.get(k, 0) + len(gpus)
        return counts

    def bound(self, domain: Domain, counts: dict[int, int]) -> tuple[int, float] | None:
        """A lower bound on the (highest priority, work lost) of any victim set clearing the domain; None when
        even every possible victim does not free enough GPUs."""
        need = self.request.total_gpus - sum(self.passes[i] for i in domain.nodes)
        if need <= 0:
            return (_NO_VICTIM, 0.0)
        if sum(counts.values()) < need:
            return None
        order = sorted(counts, key=lambda k: (self.victims[k].priority, self.work[k] / counts[k]))
        freed, highest = 0, _NO_VICTIM
        for k in order:
            freed += counts[k]
            highest = self.victims[k].priority
            if freed >= need:
                break
        left, work = need, 0.0
        for k in sorted(
            (k for k in counts if self.victims[k].priority <= highest), key=lambda k: self.work[k] / counts[k]
        ):
            take = min(left, counts[k])
            work += self.work[k] * take / counts[k]
            left -= take
            if left <= 0:
                break
        return highest, work * self.rules.moved_work_share

    # -- one domain -------------------------------------------------------------------------------------------

    def freed_view(self, domain: Domain, chosen: Iterable[int]) -> Snapshot:
        """The domain's nodes with the chosen victims' GPUs free."""
        picked = set(chosen)
        nodes: list[NodeInfo] = []
        for i in domain.nodes:
            node = self.snapshot.nodes[i]
            freed = [gpus for k, gpus in self.on_node.get(i, ()) if k in picked]
            if freed:
                node = replace(node, used_gpus=node.used_gpus.difference(*freed))
            nodes.append(node)
        return Snapshot(nodes, self.snapshot.tiers, cache=self.snapshot.cache)

    def places(self, domain: Domain, chosen: Iterable[int]) -> Placement | None:
        self.engine_calls += 1
        result = place(self.freed_view(domain, chosen), self.request)
        return result if isinstance(result, Placement) else None

    def clear(self, domain: Domain, counts: dict[int, int]) -> tuple[tuple[int, ...], Placement] | None:
        """Greedy then minimal: the victims in the domain whose removal lets the preemptor place there."""
        need = self.request.total_gpus - sum(self.passes[i] for i in domain.nodes)
        order = sorted(
            counts,
            key=lambda k: (self.victims[k].priority, self.work[k] / counts[k], -counts[k], self.victims[k].name),
        )
        chosen: list[int] = []
        freed = 0
        placement = self.places(domain, chosen) if need <= 0 else None
        for k in order:
            if placement is not None:
                break
            if len(chosen) >= self.rules.max_victims:
                return None
            chosen.append(k)
            freed += counts[k]
            if freed >= need:
                placement = self.places(domain, chosen)
        if placement is None:
            return None
        # Minimality: drop, dearest first, every victim the preemptor does not need.
        for k in sorted(chosen, key=lambda k: (-self.victims[k].priority, -self.work[k], self.victims[k].name)):
            rest = [j for j in chosen if j != k]
            again = self.places(domain, rest)
            if again is not None:
                chosen, placement = rest, again
        return tuple(chosen), placement

    def cost(self, domain: Domain, chosen: tuple[int, ...], placement: Placement, moved: set[int]) -> PreemptionCost:
        work = sum(self.work[k] * (self.rules.moved_work_share if k in moved else 1.0) for k in chosen)
        after = self.freed_view(domain, chosen).reserve(placement)
        free = stranded = 0
        for node in after:
            n = node.topology.gpu_count - len(node.used_gpus)
            free += n
            stranded += n if node.used_gpus else 0
        highest = max((self.victims[k].priority for k in chosen), default=_NO_VICTIM)
        return PreemptionCost(highest, round(work), len(chosen), round(stranded / free, 3) if free else 0.0)

    def moves(self, chosen: tuple[int, ...], placement: Placement) -> tuple[tuple[str, Placement], ...]:
        """Victims that can be re-placed at once outside their old GPUs at no worse bus bandwidth, in turn.

        Only nodes with free GPUs after the preemption can take them, so the engine sees just those.
        """
        victims = [self.victims[k] for k in chosen]
        taken: dict[str, set[int]] = {}
        for node, gpus in gpus_by_node(placement).items():
            taken.setdefault(node, set()).update(gpus)
        old: dict[str, set[int]] = {}
        for gang in victims:
            for node, gpus in gpus_by_node(gang.placement).items():
                old.setdefault(node, set()).update(gpus)
        names = set(taken) | set(old)
        hosts = [i for i, free in self.passes.items() if free > 0 or self.snapshot.nodes[i].name in names]
        out: list[tuple[str, Placement]] = []
        for gang in victims:
            nodes = []
            for i in hosts:
                host = self.snapshot.nodes[i]
                used = host.used_gpus | taken.get(host.name, set()) | old.get(host.name, set())
                if len(used) < host.topology.gpu_count:
                    nodes.append(replace(host, used_gpus=frozenset(used)))
            if not nodes:
                break
            self.engine_calls += 1
            result = place(Snapshot(nodes, self.snapshot.tiers, cache=self.snapshot.cache), gang.request())
            if isinstance(result, Placement) and result.busbw_gbps >= gang.placement.busbw_gbps - 1e-6:
                out.append((gang.name, result))
                for node, gpus in gpus_by_node(result).items():
                    taken.setdefault(node, set()).update(gpus)
        return tuple(out)


def _better(found: _Found, best: _Found | None) -> bool:
    if best is None:
        return True
    return (found.cost, -round(found.placement.busbw_gbps, 6), found.domain.rank) < (
        best.cost,
        -round(best.placement.busbw_gbps, 6),
        best.domain.rank,
    )


def plan_preemption(
    snapshot: Snapshot,
    preemptor: Preemptor,
    running: Iterable[RunningGang],
    rules: PreemptionRules = PreemptionRules(),
    nominations: Iterable[Nomination] = (),
) -> PreemptionPlan | NoPreemption:
    """The cheapest whole lower-priority gangs to preempt so the preemptor places, and where; or why none helps.

    Call it after ``place`` refused the preemptor. ``snapshot`` counts every running gang's GPUs as used;
    the GPUs of ``nominations`` to other gangs are held (never freed for this preemptor).
    """
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoPreemption("its preemptionPolicy is Never: it waits for free GPUs")
    eligible = Eligible(running, preemptor, rules)
    nominations = list(nominations)
    others: dict[str, frozenset[int]] = {}
    for nomination in nominations:
        if nomination.preemptor != preemptor.name:
            for node, gpus in nomination.gpus.items():
                others[node] = others.get(node, frozenset()) | gpus
    held = hold_nominations(snapshot, nominations, for_gang=preemptor.name)
    search = _Search(held, preemptor, eligible.victims, rules, others)
    useful = [i for i in search.passes if search.passes[i] > 0 or i in search.on_node]
    domains = candidate_domains(held, preemptor.request, useful)
    bounded: list[tuple[tuple[int, float], Domain, dict[int, int]]] = []
    for domain in domains:
        counts = search.in_domain(domain)
        bound = search.bound(domain, counts)
        if bound is not None:
            bounded.append((bound, domain, counts))
    if not bounded:
        why = "no domain holds it even with every lower-priority gang preempted"
        if not eligible.victims:
            why = "no running gang may be preempted for it"
        return NoPreemption(why, eligible.describe())
    bounded.sort(key=lambda b: (b[0], b[1].rank, b[1].name))
    found: list[_Found] = []
    searched = 0
    for bound, domain, counts in bounded:
        if domain.level == CLUSTER and found:
            continue
        if searched >= rules.max_domains:
            break
        if found and bound > min((f.cost.highest_priority, f.cost.work_lost_gpu_s) for f in found):
            break
        searched += 1
        cleared = search.clear(domain, counts)
        if cleared is None:
            continue
        chosen, placement = cleared
        found.append(_Found(chosen, placement, search.cost(domain, chosen, placement, set()), domain, ()))
    if not found:
        return NoPreemption(
            f"no domain holds it within {rules.max_victims} victims of lower priority "
            f"({searched} of {len(bounded)} candidate domains searched)",
            eligible.describe(),
        )
    # Consolidation: victims that move at once cost less; worked out for the plans that could still win.
    found.sort(key=lambda f: (f.cost, -f.placement.busbw_gbps))
    best: _Found | None = None
    for item in found:
        optimistic = item.cost._replace(work_lost_gpu_s=round(item.cost.work_lost_gpu_s * rules.moved_work_share))
        if best is not None and optimistic > best.cost:
            break
        moves = search.moves(item.victims, item.placement) if item.victims else ()
        moved = {k for k in item.victims if search.victims[k].name in {name for name, _ in moves}}
        refined = replace(item, cost=search.cost(item.domain, item.victims, item.placement, moved), moves=moves)
        if _better(refined, best):
            best = refined
    assert best is not None
    victims = tuple(sorted((search.victims[k] for k in best.victims), key=lambda v: v.name))
    return PreemptionPlan(preemptor.name, victims, best.domain, best.placement, best.cost, best.moves, searched)
