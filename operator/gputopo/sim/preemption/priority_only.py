"""The peer policy that preempts by priority alone, as Kueue and the default scheduler do: no topology.

Candidates are the running gangs the same rules allow (lower priority, preemptible, past their minimum
runtime, not protected, no cycle), taken lowest priority first, then most recently started, until the engine
places the preemptor on the whole cluster with their GPUs freed; then, as Kueue does, each is put back in turn
if the preemptor still places without it. The preemptor is placed by gputopo's engine either way, so a
comparison on the same cluster (the replay's ``shadow``) measures the choice of victims alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gputopo.placement.engine import place
from gputopo.placement.preemption.domains import CLUSTER, Domain
from gputopo.placement.preemption.eligibility import Eligible
from gputopo.placement.preemption.gangs import (
    Nomination,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    RunningGang,
)
from gputopo.placement.preemption.index import RunningIndex
from gputopo.placement.preemption.victims import NoPreemption, PreemptionCost, PreemptionPlan
from gputopo.placement.types import NodeInfo, Placement, Snapshot

__all__ = ["preempt_by_priority"]


def _freed(index: RunningIndex, chosen: Iterable[int]) -> Snapshot:
    snapshot = index.snapshot
    picked = set(chosen)
    changed: dict[int, NodeInfo] = {}
    for k in picked:
        for i in index.nodes_of[k]:
            node = snapshot.nodes[i]
            freed = [gpus for j, gpus in index.on_node[i] if j in picked]
            changed[i] = replace(node, used_gpus=node.used_gpus.difference(*freed))
    return snapshot.part(range(len(snapshot)), changed)


def preempt_by_priority(
    snapshot: Snapshot,
    preemptor: Preemptor,
    running: Iterable[RunningGang],
    rules: PreemptionRules = PreemptionRules(),
    nominations: Iterable[Nomination] = (),
) -> PreemptionPlan | NoPreemption:
    """Victims by priority, then recency, then put back while the preemptor still places."""
    index = RunningIndex(snapshot, running, nominations)
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoPreemption("its preemptionPolicy is Never: it waits for free GPUs")
    if preemptor.name in index.nominated:
        return NoPreemption("GPUs are already nominated to it: it waits for its victims to end")
    eligible = Eligible(index.running, preemptor, rules)
    order = sorted(eligible.indices, key=lambda k: (index.running[k].priority, -index.running[k].start_time, k))
    chosen: list[int] = []
    placement: Placement | None = None
    for k in order:
        if len(chosen) >= 4 * rules.max_victims:
            break
        chosen.append(k)
        result = place(_freed(index, chosen), preemptor.request)
        if isinstance(result, Placement):
            placement = result
            break
    if placement is None:
        return NoPreemption("no set of lower-priority gangs frees room for it", eligible.describe())
    for k in reversed(chosen[:-1]):
        rest = [j for j in chosen if j != k]
        result = place(_freed(index, rest), preemptor.request)
        if isinstance(result, Placement):
            chosen, placement = rest, result
    if len(chosen) > rules.max_victims:
        return NoPreemption(f"it needs more than {rules.max_victims} victims", eligible.describe())
    victims = tuple(sorted((index.running[k] for k in chosen), key=lambda v: v.name))
    work = sum(v.work_lost(rules.now) for v in victims)
    waiting = sum(v.gpu_count for v in victims)  # it moves none of them
    cost = PreemptionCost(max(v.priority for v in victims), round(work), waiting, len(victims), 0.0)
    domain = Domain(CLUSTER, CLUSTER, tuple(range(len(snapshot))), 99)
    return PreemptionPlan(preemptor.name, victims, domain, placement, cost)
