"""Victims chosen by topology: ``plan_preemption(snapshot, preemptor, running, rules, nominations)``.

For a gang the engine cannot place as required, each candidate domain (a node, an NVLink domain, a switch of
each tier, last the whole cluster) gets the cheapest set of whole lower-priority gangs whose removal lets
the engine place the gang there, checked by calling ``place`` on the domain's nodes with those gangs' GPUs
freed; a gang of several GPU shapes (``Preemptor.more``) is placed there a shape at a time, as ``plan_gang``
places it, and its bounds count its GPUs in slots of their greatest common divisor. (A gang itself preempted
within ``PreemptionRules.protection_s`` preempts nobody: it waits for free GPUs, so one arrival does not end gangs
down a chain of priorities.)

1. Bound: a domain whose free GPUs plus preemptible GPUs cannot hold the gang is skipped; the others are
   searched cheapest lower bound first (the lowest priority that frees enough GPUs, and the work lost by a
   fractional fill), and the search stops at a domain whose bound is dearer than the best plan found, or
   after ``PreemptionRules.max_domains`` domains.
2. Greedy: victims are added lowest priority first, then least work lost per GPU freed in the domain, then
   largest, until the gang places; then a minimality pass drops, dearest first, every victim without which
   it still places at no worse bus bandwidth, and when that keeps several, densest and smallest first too; the
   cheapest set within ``max_victims`` is kept (``minimal.cheapest_minimal``), whatever GPUs each victim holds.
   No subset enumeration: the engine is called O(victims) times per domain.
3. Cost, compared in order: the highest priority among the victims, the work they lose (GPU-seconds since
   their checkpoint or start, whether or not they can be re-placed at once: a restart loses it either way),
   the GPUs of victims that cannot be re-placed at once elsewhere at no worse bus bandwidth (they wait in the
   queue: consolidation), the number of gangs broken, the fragmentation left in the domain. A preemptor that may
   wait for its victims' next checkpoint (``Preemptor.checkpoint_wait_s``) compares plans by the work they lose
   at the best moment within its wait, less its GPUs idle until then (``checkpoint_gain``), and when the plan it
   takes is cheaper later it is told to come back then (``NoPreemption.retry_at``) and preempts nobody now.
   Among the cheapest, the domain giving the preemptor the best bus bandwidth wins; "the cheapest" are the
   plans of the lowest victim priority whose work lost is within ``near_share`` (or ``near_gpu_s``) of the
   least, so float-sized savings of work never put a high-priority gang on PCIe pairs instead of an NVSwitch
   board. A domain is searched while its bound is within that tolerance of the cheapest plan found.

The whole cluster is searched last, since one engine call there costs as much as every switch's together:
when no smaller domain holds the gang, or when its bound is cheaper than the best plan found; then its plan
is kept only at no worse bus bandwidth than that plan (a gang whose bandwidth the nodes bound anyway need not
lose four times the work to stay under one switch), unless its victims are of lower priority than that plan's:
priority comes first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from gputopo.placement.engine import place
from gputopo.placement.filters import node_rejection
from gputopo.placement.preemption.bounds import NO_LEVEL, NodeVictims, domain_work
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
from gputopo.placement.preemption.index import RunningIndex
from gputopo.placement.preemption.minimal import VictimCosts, cheapest_minimal, unused_by
from gputopo.placement.shapes import place_shapes, ranked
from gputopo.placement.types import NodeInfo, Placement, Snapshot

__all__ = ["NoPreemption", "PreemptionCost", "PreemptionPlan", "plan_preemption", "preemption_refusal"]

_NO_VICTIM = -(2**62)


class PreemptionCost(NamedTuple):
    """Compared field by field, lower is cheaper."""

    highest_priority: int  # of the victims; far below any priority when there are none
    work_lost_gpu_s: float  # rounded to a GPU-second so float noise does not decide
    gpus_waiting: int  # of the victims that cannot be re-placed at once elsewhere: they wait in the queue
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
    """Why no preemption helps, in words a user can act on; ``retry_at``, when it should be asked again (its
    victims' next checkpoint, which it waits for)."""

    reason: str
    details: tuple[str, ...] = ()
    retry_at: float | None = None

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
    """One decision's state over a pass's ``RunningIndex``: which gangs are victims, and the nodes that pass."""

    def __init__(self, index: RunningIndex, preemptor: Preemptor, rules: PreemptionRules) -> None:
        self.index = index
        self.snapshot = snapshot = index.snapshot
        self.preemptor = preemptor
        self.request = preemptor.slots()  # what the bounds count; ``places`` places every shape
        self.rules = rules
        self.victims = index.running
        self.eligible = Eligible(index.running, preemptor, rules)
        self.ok = [False] * len(index.running)
        self.work = [0.0] * len(index.running)
        now, sizes, since = rules.now, index.sizes, index.since
        for k in self.eligible.indices:
            self.ok[k] = True
            gang = index.running[k]
            # RunningGang.work_lost, from the index's columns unless the gang checkpoints on a declared interval
            self.work[k] = gang.work_lost(now) if gang.checkpoint_interval_s else sizes[k] * max(0.0, now - since[k])
        deadline = preemptor.checkpoint_deadline(now)
        if deadline is not None:
            # A preemptor that may wait searches with each victim's work at its best moment: none at its next
            # checkpoint within the wait. The plans found are then costed as a whole (``checkpoint_gain``).
            for k in self.eligible.indices:
                due = index.running[k].next_checkpoint(now)
                if due is not None and due <= deadline:
                    self.work[k] = 0.0
        requests = [shape.request for shape in preemptor.shapes]
        plain = not any(r.node_selector or r.affinity_terms or r.gpu_model or r.tolerations for r in requests)
        self.passes: dict[int, int] = {}  # node index -> its free GPUs, for nodes that may take a worker
        free, on_node = index.free, index.on_node
        for i, info in enumerate(snapshot.nodes):
            if not free[i] and i not in on_node:
                continue
            if (plain and index.plain[i]) or any(node_rejection(info, r) is None for r in requests):
                self.passes[i] = free[i]
        self.engine_calls = 0
        key = (rules.now, rules.protection_s, preemptor.priority, preemptor.preempted_by)
        self._node_victims = index.slot_memo(key)
        self._whole_victims = index.slot_memo((*key, "whole"))
        self.levels = sorted({index.running[k].priority for k in self.eligible.indices})
        self._slots: dict[int, tuple[int, ...]] = {}
        self._free_hosts: list[int] | None = None

    def here(self, i: int) -> list[tuple[int, frozenset[int]]]:
        """The victims on node ``i`` and the GPUs their end frees there."""
        return [(k, gpus) for k, gpus in self.index.on_node.get(i, ()) if self.ok[k]]

    def free_hosts(self) -> list[int]:
        """The nodes that pass with a free GPU (worked out once: every plan's moves look at them)."""
        if self._free_hosts is None:
            self._free_hosts = [i for i, free in self.passes.items() if free > 0]
        return self._free_hosts

    def useful(self) -> list[int]:
        return [i for i, free in self.passes.items() if free or any(self.ok[k] for k, _ in self.index.on_node[i])]

    # -- bounds -----------------------------------------------------------------------------------------------

    def node_victims(self, i: int, whole: bool = False) -> NodeVictims:
        """Node ``i``'s free GPUs and victims, each victim's work counted by its share of GPUs here (a gang on
        several nodes costs each of them part), or ``whole`` (the domain is this node alone, so any victim
        needed there is lost whole: a 32-node gang costs a one-node domain all its work, not a 32nd)."""
        memo = self._whole_victims if whole else self._node_victims
        found = memo.get(i)
        if found is None:
            sizes = self.index.sizes
            victims = tuple(
                (self.victims[k].priority, self.work[k] * (1.0 if whole else len(gpus) / sizes[k]), len(gpus))
                for k, gpus in self.here(i)
            )
            found = memo[i] = NodeVictims(self.passes.get(i, 0), victims)
        return found

    def slots(self, i: int) -> tuple[int, ...]:
        """Node ``i``'s free worker slots, then the slots its victims of priority at most each of ``levels``
        add (``NodeVictims.slots`` without the work)."""
        found = self._slots.get(i)
        if found is None:
            g = self.request.gpus_per_worker
            free = self.passes.get(i, 0)
            here = [(self.victims[k].priority, len(gpus)) for k, gpus in self.here(i)]
            row = [free // g]
            for level in self.levels:
                total = free + sum(gpus for priority, gpus in here if priority <= level)
                row.append(total // g - free // g)
            found = self._slots[i] = tuple(row)
        return found

    def level(self, domain: Domain) -> int | None:
        """A lower bound on the highest priority of any victim set clearing the domain (``NO_LEVEL`` when its
        free GPUs suffice); None when even every possible victim does not free enough slots. Slots are
        counted, not costed, so every candidate domain gets one cheaply (``bounds.domain_level``)."""
        workers = self.request.workers
        known = self._slots.get  # most nodes are in several domains: skip the call once worked out
        rows = [known(i) or self.slots(i) for i in domain.nodes]
        have = sum(row[0] for row in rows)
        if have >= workers:
            return NO_LEVEL
        for column, level in enumerate(self.levels, start=1):
            if have + sum(row[column] for row in rows) >= workers:
                return level
        return None

    def work_bound(self, domain: Domain, level: int) -> float:
        """A lower bound on the work lost by any victim set of priority at most ``level`` clearing the domain;
        only nodes whose victims add a slot at that level are costed."""
        if level == NO_LEVEL:
            return 0.0
        column = self.levels.index(level) + 1
        known = self._slots.get
        rows = [(i, known(i) or self.slots(i)) for i in domain.nodes]
        wanted = self.request.workers - sum(row[0] for _, row in rows)
        whole = len(domain.nodes) == 1
        nodes = [self.node_victims(i, whole) for i, row in rows if row[column]]
        return domain_work(nodes, wanted, self.request.gpus_per_worker, level)

    # -- one domain -------------------------------------------------------------------------------------------

    def freed_view(self, domain: Domain, chosen: Iterable[int]) -> Snapshot:
        """The domain's nodes with the chosen victims' GPUs free."""
        picked = set(chosen)
        changed: dict[int, NodeInfo] = {}
        for k in picked:
            for i in self.index.nodes_of[k]:
                if i not in changed:
                    node = self.snapshot.nodes[i]
                    freed = [gpus for j, gpus in self.index.on_node[i] if j in picked]
                    changed[i] = replace(node, used_gpus=node.used_gpus.difference(*freed))
        return self.snapshot.part(domain.nodes, changed)

    def places(self, domain: Domain, chosen: Iterable[int]) -> Placement | None:
        """The preemptor's placement in the domain with the chosen victims gone, or None. A gang of several
        shapes is placed a shape at a time, each after the earlier ones are reserved, as ``plan_gang`` does."""
        self.engine_calls += 1
        view = self.freed_view(domain, chosen)
        preemptor = self.preemptor
        if preemptor.more:
            result = place_shapes(view, preemptor.shapes, place)
        else:
            result = place(view, preemptor.request)
            if isinstance(result, Placement) and preemptor.ranks:
                result = ranked(result, preemptor.ranks)
        return result if isinstance(result, Placement) else None

    def clear(self, domain: Domain) -> tuple[tuple[int, ...], Placement] | None:
        """Greedy then minimal: the victims in the domain whose removal lets the preemptor place there.

        Greedy by node: each node's victims go together, nodes cheapest per slot gained first (lowest highest
        priority, then least work per slot), until the domain has slots for every worker and the engine places
        the gang; the minimality pass then keeps only the victims it needs, the cheapest of the sets kept
        dropping dearest, densest and smallest first (``cheapest_minimal``).

        In a multi-node NVLink domain the victims are also taken one gang at a time, cheapest per GPU it frees
        in the domain first, and the cheaper set of the two is kept: there a gang over several trays frees
        them all at once, and the engine counts the trays in use against the domain's cap, so which nodes free
        slots says less than which gangs end (per node, a four-tray gang's whole work is charged to each tray).
        """
        found = self._cleared(domain, self._by_node(domain))
        if not any(self.snapshot.nvlink_domains[i] for i in domain.nodes):
            return found
        other = self._cleared(domain, self._by_gang(domain))
        if other is not None and (found is None or self._dearness(other[0]) < self._dearness(found[0])):
            return other
        return found

    def _dearness(self, chosen: Sequence[int]) -> tuple[int, float, int]:
        """The cost's victim fields, as plans are compared: the highest victim priority, the work lost (for a
        preemptor that may wait, at the best moment within its wait: ``checkpoint_gain``), the gangs broken."""
        highest = max((self.victims[k].priority for k in chosen), default=_NO_VICTIM)
        if self.preemptor.checkpoint_wait_s <= 0 or not chosen:
            return highest, round(sum(self.work[k] for k in chosen)), len(chosen)
        victims, now = tuple(self.victims[k] for k in chosen), self.rules.now
        lost = sum(v.work_lost(now) for v in victims) - checkpoint_gain(victims, self.preemptor, self.rules)[1]
        return highest, round(lost), len(chosen)

    def _by_node(self, domain: Domain) -> list[list[int]]:
        """The domain's victims in groups of a node's, nodes cheapest per slot gained first."""
        g = self.request.gpus_per_worker
        ranked = []
        for i in domain.nodes:
            here = self.here(i)
            if not here:
                continue
            gain = (self.passes.get(i, 0) + sum(len(gpus) for _, gpus in here)) // g - self.passes.get(i, 0) // g
            if gain <= 0:
                continue
            highest = max(self.victims[k].priority for k, _ in here)
            work = sum(self.work[k] for k, _ in here)
            ranked.append((highest, work / gain, self.snapshot.nodes[i].name, i))
        ranked.sort()
        return [[k for k, _ in self.here(i)] for _, _, _, i in ranked]

    def _by_gang(self, domain: Domain) -> list[list[int]]:
        """The domain's victims one gang at a time: lowest priority, then least work per GPU freed in it."""
        freed: dict[int, int] = {}
        for i in domain.nodes:
            for k, gpus in self.here(i):
                freed[k] = freed.get(k, 0) + len(gpus)
        order = sorted(freed, key=lambda k: (self.victims[k].priority, self.work[k] / freed[k], self.victims[k].name))
        return [[k] for k in order]

    def _cleared(self, domain: Domain, groups: list[list[int]]) -> tuple[tuple[int, ...], Placement] | None:
        """Greedy over ``groups`` in order until the engine places the gang, then minimal (see ``clear``)."""
        g = self.request.gpus_per_worker
        freed: dict[int, int] = {}
        slots = sum(self.passes.get(i, 0) // g for i in domain.nodes)
        chosen: list[int] = []
        picked: set[int] = set()
        placement = self.places(domain, chosen) if slots >= self.request.workers else None
        members = set(domain.nodes)
        for group in groups:
            if placement is not None:
                break
            for k in group:
                if k in picked:
                    continue
                picked.add(k)
                chosen.append(k)
                for j in self.index.nodes_of[k]:
                    if j in members:
                        count = next(len(gpus) for v, gpus in self.index.on_node[j] if v == k)
                        before = (self.passes.get(j, 0) + freed.get(j, 0)) // g
                        freed[j] = freed.get(j, 0) + count
                        slots += (self.passes.get(j, 0) + freed[j]) // g - before
            if len(chosen) > 4 * self.rules.max_victims:
                return None
            if slots >= self.request.workers:
                placement = self.places(domain, chosen)
        if placement is None:
            return None
        greedy, first = chosen, placement

        def places(rest: list[int]) -> Placement | None:
            return self.places(domain, rest)

        # A victim the placement leaves alone goes without asking the engine, at its turn; not in multi-node
        # NVLink domains, where nodes in use count against the domain's cap.
        unused = None if any(self.snapshot.nvlink_domains[i] for i in domain.nodes) else unused_by(self.victims)
        victims = VictimCosts(self.victims, self.work, self.index.sizes)
        kept = cheapest_minimal(greedy, first, places, unused, victims, self._dearness, self.rules.max_victims)
        if kept is None:
            return None
        chosen, placement = kept
        return tuple(chosen), placement

    def cost(self, domain: Domain, chosen: tuple[int, ...], placement: Placement, moved: set[int]) -> PreemptionCost:
        work = sum(self.work[k] for k in chosen)
        after = self.freed_view(domain, chosen).reserve(placement)
        free = stranded = 0
        for node in after:
            n = node.topology.gpu_count - len(node.used_gpus)
            free += n
            stranded += n if node.used_gpus else 0
        highest = max((self.victims[k].priority for k in chosen), default=_NO_VICTIM)
        waiting = sum(self.index.sizes[k] for k in chosen if k not in moved)
        return PreemptionCost(highest, round(work), waiting, len(chosen), round(stranded / free, 3) if free else 0.0)

    def moves(self, chosen: tuple[int, ...], placement: Placement) -> tuple[tuple[str, Placement], ...]:
        """Victims that can be re-placed at once outside their old GPUs at no worse bus bandwidth, in turn, the
        one that would lose most work first.

        Only nodes with free GPUs after the preemption can take them, so the engine sees just those.
        """
        # The victim that would lose most first: its move saves the most.
        victims = [self.victims[k] for k in sorted(chosen, key=lambda k: (-self.work[k], self.victims[k].name))]
        taken: dict[str, set[int]] = {}
        for node, gpus in gpus_by_node(placement).items():
            taken.setdefault(node, set()).update(gpus)
        old: dict[str, set[int]] = {}
        for gang in victims:
            for node, gpus in gpus_by_node(gang.placement).items():
                old.setdefault(node, set()).update(gpus)
        names = set(taken) | set(old)
        hosts = sorted({*self.free_hosts(), *(i for i in map(self.snapshot.index_of, names) if i in self.passes)})
        out: list[tuple[str, Placement]] = []
        for gang in victims:
            changed: dict[int, NodeInfo] = {}
            for i in hosts:
                host = self.snapshot.nodes[i]
                used = host.used_gpus | taken.get(host.name, set()) | old.get(host.name, set())
                if len(used) < host.topology.gpu_count:
                    changed[i] = replace(host, used_gpus=frozenset(used))
            if not changed:
                break
            self.engine_calls += 1
            result = place(self.snapshot.part(list(changed), changed), gang.request())
            if isinstance(result, Placement) and result.busbw_gbps >= gang.placement.busbw_gbps - 1e-6:
                out.append((gang.name, result))
                for node, gpus in gpus_by_node(result).items():
                    taken.setdefault(node, set()).update(gpus)
        return tuple(out)


def _cheapest_first(search: _Search, leveled: list[tuple[int, Domain]]) -> Iterator[tuple[tuple[int, float], Domain]]:
    """The domains with their (priority, work) bounds, cheapest first, the whole cluster last (its bound is the
    lowest of all, but one engine call there costs as much as every switch's together).

    The work bound is dear (every node's slot costs), so it is worked out a priority level at a time, as the
    search reaches that level: the search stops long before the dearer levels.
    """
    groups: dict[tuple[bool, int], list[Domain]] = {}
    for level, domain in leveled:
        groups.setdefault((domain.level == CLUSTER, level), []).append(domain)
    for (_, level), members in sorted(groups.items(), key=lambda g: g[0]):
        bounded = [((level, search.work_bound(d, level)), d) for d in members]
        bounded.sort(key=lambda b: (b[0], b[1].rank, b[1].name))
        yield from bounded


def preemption_refusal(index: RunningIndex, preemptor: Preemptor, rules: PreemptionRules) -> NoPreemption | None:
    """Why the preemptor preempts nobody whatever runs: its policy is Never, GPUs are nominated to it already, or
    it was itself preempted within the protection time; None when it may preempt."""
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoPreemption("its preemptionPolicy is Never: it waits for free GPUs")
    if preemptor.name in index.nominated:
        return NoPreemption("GPUs are already nominated to it: it waits for its victims to end")
    since = rules.now - preemptor.preempted_at if preemptor.preempted_at is not None else math.inf
    if since < rules.protection_s:
        return NoPreemption(
            f"it was preempted {since:.0f} s ago: for {rules.protection_s:.0f} s after a preemption a gang waits for "
            "free GPUs rather than preempt in turn"
        )
    return None


def plan_preemption(
    snapshot: Snapshot | RunningIndex,
    preemptor: Preemptor,
    running: Iterable[RunningGang] = (),
    rules: PreemptionRules = PreemptionRules(),
    nominations: Iterable[Nomination] = (),
) -> PreemptionPlan | NoPreemption:
    """The cheapest whole lower-priority gangs to preempt so the preemptor places, and where; or why none helps.

    Call it after ``place`` refused the preemptor. ``snapshot`` counts every running gang's GPUs as used;
    the GPUs of ``nominations`` are held (never freed again for another preemptor). A pass with several
    preemptors builds one ``RunningIndex(snapshot, running, nominations)`` and passes it instead. A gang of
    exclusive parts (``Preemptor.exclusive_label``) is planned by ``plan_exclusive_preemption``, a part at a time.
    """
    index = snapshot if isinstance(snapshot, RunningIndex) else RunningIndex(snapshot, running, nominations)
    refused = preemption_refusal(index, preemptor, rules)
    if refused is not None:
        return refused
    if preemptor.exclusive_label:
        # Each exclusive part in a domain of its own label: several domains cleared together, one per part.
        from gputopo.placement.preemption.exclusive import plan_exclusive_preemption  # it calls this per part

        return plan_exclusive_preemption(index, preemptor, rules=rules)
    search = _Search(index, preemptor, rules)
    eligible = search.eligible
    domains = candidate_domains(index.snapshot, search.request, search.useful())
    leveled: list[tuple[int, Domain]] = []
    last: Domain | None = None
    for domain in domains:
        if domain.level == CLUSTER:
            last = domain  # bounded only when searched: no smaller domain holds the gang
            continue
        level = search.level(domain)
        if level is not None:
            leveled.append((level, domain))
    if last is not None and (len(leveled) < rules.max_domains or not leveled):
        level = search.level(last)
        if level is not None:
            leveled.append((level, last))
    if not leveled:
        why = "no domain holds it even with every lower-priority gang preempted"
        if not eligible.indices:
            why = "no running gang may be preempted for it"
        return NoPreemption(why, eligible.describe())
    found: list[_Found] = []
    searched = 0

    def near(work: float) -> float:
        """The most work a plan may lose and still count as cheapest beside one that loses ``work``."""
        return work * (1 + rules.near_share) + rules.near_gpu_s

    def cheapest() -> tuple[int, float]:
        """What a domain's bound must not exceed to be searched: the lowest victim priority found, and the
        most work a plan of that priority may lose and still be among the cheapest."""
        priority, work = min((f.cost.highest_priority, f.cost.work_lost_gpu_s) for f in found)
        return priority, near(work)

    def search_in(domain: Domain) -> None:
        nonlocal searched
        searched += 1
        cleared = search.clear(domain)
        if cleared is None:
            return
        chosen, placement = cleared
        if domain.level == CLUSTER and found:
            # Searched after a smaller domain's plan only because its bound is cheaper: kept only at no worse
            # bus bandwidth than the plan it would replace, so less work lost never costs the preemptor bandwidth;
            # but a plan that spares the victims' priority (only low gangs where the switch needed mid ones) is
            # kept: priority comes first in the cost, before work and bandwidth.
            best = min(found, key=lambda f: (f.cost, -f.placement.busbw_gbps, f.domain.rank))
            spares = search._dearness(chosen)[0] < best.cost.highest_priority
            if placement.busbw_gbps < best.placement.busbw_gbps - 1e-6 and not spares:
                return
        found.append(_Found(chosen, placement, search.cost(domain, chosen, placement, set()), domain, ()))

    whole = [(level, domain) for level, domain in leveled if domain.level == CLUSTER]
    for bound, domain in _cheapest_first(search, [x for x in leveled if x[1].level != CLUSTER]):
        if searched >= rules.max_domains or (found and bound > cheapest()):
            break
        search_in(domain)
    for level, domain in whole:
        if searched < rules.max_domains and (not found or (level, search.work_bound(domain, level)) <= cheapest()):
            search_in(domain)
    if not found:
        return NoPreemption(
            f"no domain holds it within {rules.max_victims} victims of lower priority "
            f"({searched} of {len(leveled)} candidate domains searched)",
            eligible.describe(),
        )
    # A preemptor that may wait for its victims' next checkpoint compares plans by what they lose at the best
    # moment within its wait (``checkpoint_gain``): a gang two minutes before its checkpoint is cheap to wait for.
    spared: dict[tuple[int, ...], float] = {}  # victims -> work lost at their best moment

    def work(f: _Found) -> float:
        if preemptor.checkpoint_wait_s <= 0 or not f.victims:
            return f.cost.work_lost_gpu_s
        if f.victims not in spared:
            victims = tuple(search.victims[k] for k in f.victims)
            spared[f.victims] = (
                sum(v.work_lost(rules.now) for v in victims) - checkpoint_gain(victims, preemptor, rules)[1]
            )
        return spared[f.victims]

    # Consolidation: of plans that lose the same work, the one whose victims move at once (and wait in no queue)
    # costs less; worked out for the plans that could still be among the cheapest (the lowest victim priority,
    # work within ``near`` of the least).
    found.sort(key=lambda f: (f.cost.highest_priority, work(f), -f.placement.busbw_gbps))
    lowest, limit = found[0].cost.highest_priority, math.inf
    refined: list[_Found] = []
    for item in found:
        if item.cost.highest_priority > lowest or work(item) > limit:
            break
        moves = search.moves(item.victims, item.placement) if item.victims else ()
        moved = {k for k in item.victims if search.victims[k].name in {name for name, _ in moves}}
        item = replace(item, cost=search.cost(item.domain, item.victims, item.placement, moved), moves=moves)
        refined.append(item)
        limit = min(limit, near(work(item)))
    # Among the cheapest, the best bus bandwidth for the preemptor, then the least work, gangs, fragmentation.
    best = min(
        (f for f in refined if work(f) <= limit),
        key=lambda f: (-round(f.placement.busbw_gbps, 6), f.cost, f.domain.rank),
        default=None,
    )
    assert best is not None
    victims = tuple(sorted((search.victims[k] for k in best.victims), key=lambda v: v.name))
    wait = checkpoint_wait(victims, preemptor, rules)
    if wait is not None:
        return wait
    cost = best.cost
    if preemptor.checkpoint_wait_s > 0:  # preempting now: the work they lose now, not at their next checkpoint
        cost = cost._replace(work_lost_gpu_s=round(sum(v.work_lost(rules.now) for v in victims)))
    return PreemptionPlan(preemptor.name, victims, best.domain, best.placement, cost, best.moves, searched)


def checkpoint_gain(
    victims: tuple[RunningGang, ...], preemptor: Preemptor, rules: PreemptionRules
) -> tuple[float, float]:
    """The best moment to preempt ``victims`` within the preemptor's checkpoint wait, and the GPU-seconds that
    saves: the work they would lose now less what they lose then, less the preemptor's GPUs idle meanwhile
    (``(now, 0)``: now)."""
    now = rules.now
    deadline = preemptor.checkpoint_deadline(now)
    if deadline is None:
        return now, 0.0
    times = sorted({t for v in victims if (t := v.next_checkpoint(now)) is not None and now < t <= deadline})
    lost_now = sum(v.work_lost(now) for v in victims) if times else 0.0
    best_t, best_gain = now, 0.0
    for t in times:
        gain = lost_now - sum(v.work_lost(t) for v in victims) - preemptor.total_gpus * (t - now)
        if gain > best_gain:
            best_t, best_gain = t, gain
    return best_t, best_gain


def checkpoint_wait(
    victims: tuple[RunningGang, ...], preemptor: Preemptor, rules: PreemptionRules
) -> NoPreemption | None:
    """Wait for the victims' next checkpoint rather than preempt now, when the preemptor may wait that long
    (``Preemptor.checkpoint_wait_s`` from when it was queued) and the work it spares them is more than the
    preemptor's GPUs idle meanwhile, and at least ``near_gpu_s``: a 256-GPU gang two minutes before its
    half-hourly checkpoint loses 120 GPU-hours now, almost none then. None: preempt now."""
    best_t, best_gain = checkpoint_gain(victims, preemptor, rules)
    if best_gain <= 0 or best_gain < rules.near_gpu_s:
        return None
    now = rules.now
    return NoPreemption(
        f"its victims checkpoint in {best_t - now:.0f} s: it waits for that rather than have them lose "
        f"{best_gain / 3600:.1f} GPU-hours more",
        tuple(v.name for v in victims),
        retry_at=best_t,
    )
