"""The cluster view: indexed facts turned into the placement engine's ``Snapshot``.

A GPU counts as used when any of these says so, reality first:
  1. the node's probe reports a pod holding it (``NodePodGpus.status.pods``);
  2. one of gputopo's pods is bound to the node with it planned (annotation);
  3. a pod gputopo does not own is bound to the node and requests GPUs the probe has not attributed —
     it gets the highest free indices, so the count is right even when the indices are unknown;
  4. a plan of an active job, from its status or from the ledger, holds it;
  5. in DRA mode: a ResourceClaim (anyone's) has its device allocated, or the driver does not publish it,
     or its device is tainted — kube-scheduler would not give it to a new claim.

Indices can collide where they cannot in reality: in devicePlugin mode the kubelet may give a pod other GPUs
than planned, so a job's reported GPUs can be the very indices another job's plan (not yet reported) names.
Each holder is therefore also counted: a node shows at least as many GPUs used as its holders hold together,
the missing ones taken from the highest free indices, so the operator never counts a GPU free that
kube-scheduler counts taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gputopo.control.dra import DraView
from gputopo.control.facts import NodeFacts, PodFacts, PodGpusFacts, TopologyFacts
from gputopo.control.kueue_quota import KueueView
from gputopo.control.ledger import PlannedGang
from gputopo.control.priority import PriorityClassFacts
from gputopo.control.quarantine import Quarantine
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import NodeInfo, Snapshot, TierConfig

__all__ = ["ClusterView", "build_snapshot", "used_gpus"]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The facts one control-loop pass works from."""

    topologies: Mapping[str, TopologyFacts]
    nodes: Mapping[str, NodeFacts]
    pods: tuple[PodFacts, ...]  # pods holding or wanting GPUs, gputopo's and others'
    dra: DraView | None = None  # the DRA driver's devices and all claims; None in device-plugin mode
    pod_gpus: Mapping[str, PodGpusFacts] = field(default_factory=dict)  # per node, the probe's report of its pods
    priority_classes: Mapping[str, PriorityClassFacts] = field(default_factory=dict)  # by name
    kueue: KueueView | None = None  # the Workloads of jobs in Kueue queues; None where Kueue's API is not served

    def real_gpus(self, namespace: str, name: str, node: str) -> tuple[int, ...] | None:
        """The GPUs the probe on ``node`` says the pod holds, or None when it has not said."""
        facts = self.pod_gpus.get(node)
        if facts is None:
            return None
        for entry in facts.pods:
            if entry.namespace == namespace and entry.name == name:
                return tuple(entry.gpus)
        return None

    def real_since(self, namespace: str, name: str, node: str) -> datetime | None:
        """When the probe on ``node`` first reported the pod's current GPU list."""
        facts = self.pod_gpus.get(node)
        return facts.pod_since.get((namespace, name)) if facts is not None else None

    def seen_at(self, node: str) -> datetime | None:
        """When the probe on ``node`` last published its pods (unchanged ones too: a heartbeat)."""
        facts = self.pod_gpus.get(node)
        return facts.seen_at if facts is not None else None


def used_gpus(view: ClusterView, planned: Iterable[PlannedGang]) -> dict[str, frozenset[int]]:
    """Per node, the GPU indices held or planned."""
    # node -> holder (a job, or a pod that is not gputopo's) -> the indices said to be its
    held: dict[str, dict[object, set[int]]] = {}
    counted: dict[str, int] = {}  # node -> GPUs held at indices nobody knows (pods that are not ours)

    def hold(node: str, holder: object, gpus: Iterable[int]) -> None:
        held.setdefault(node, {}).setdefault(holder, set()).update(gpus)

    jobs_of = {(p.namespace, p.name): p.holder for p in view.pods if p.holder is not None}
    attributed: set[tuple[str, str]] = set()
    for name, report in view.pod_gpus.items():
        for entry in report.pods:
            job = jobs_of.get((entry.namespace, entry.name))
            hold(name, (entry.namespace, job) if job is not None else ("pod", entry.namespace, entry.name), entry.gpus)
            attributed.add((entry.namespace, entry.name))
    for pod in view.pods:
        if not pod.node or not pod.holds_gpus or (pod.namespace, pod.name) in attributed:
            continue
        if pod.holder is not None and pod.planned_gpus is not None:
            hold(pod.node, (pod.namespace, pod.holder), pod.planned_gpus)
        elif pod.gpus_requested:
            counted[pod.node] = counted.get(pod.node, 0) + pod.gpus_requested
    for plan in planned:
        for node, gpus in plan.workers:
            hold(node, plan.job, gpus)
    # DRA allocations name their devices exactly (gputopo's own claims among them, whose GPUs its plans hold too):
    # they are used indices, not holders to count.
    exact: dict[str, frozenset[int]] = {}
    if view.dra is not None:
        for name, facts in view.topologies.items():
            if facts.topology is not None:
                uuids = {g.index: g.uuid for g in facts.topology.gpus}
                exact[name] = frozenset(view.dra.unavailable(name, uuids))
    used: dict[str, frozenset[int]] = {}
    for node in held.keys() | counted.keys() | exact.keys():
        holders = held.get(node, {})
        taken = set().union(*holders.values()) if holders else set()
        missing = sum(len(gpus) for gpus in holders.values()) + counted.get(node, 0) - len(taken)
        taken |= exact.get(node, frozenset())
        if missing > 0:
            known = view.topologies.get(node)
            total = known.topology.gpu_count if known is not None and known.topology is not None else 0
            taken.update(sorted(set(range(total)) - taken, reverse=True)[:missing])
        if taken:
            used[node] = frozenset(taken)
    return used


def build_snapshot(
    view: ClusterView,
    planned: Iterable[PlannedGang],
    tiers: TierConfig,
    quarantine: Quarantine | None = None,
    now: datetime | None = None,
    cache: PlacementCache | None = None,
) -> Snapshot:
    """GPU nodes that have both a Node and a readable NodeTopology, in name order; ``cache`` carries what
    was worked out for an earlier snapshot of the same models (see ``PlacementCache``)."""
    used = used_gpus(view, planned)
    infos: list[NodeInfo] = []
    for name in sorted(view.topologies):
        facts, node = view.topologies[name], view.nodes.get(name)
        if node is None or facts.topology is None:
            continue
        topology = facts.topology
        if quarantine is not None and now is not None:
            topology = quarantine.mask(name, topology, now)
        infos.append(
            NodeInfo(
                name=name,
                topology=topology,
                labels=node.labels,
                taints=node.taints,
                schedulable=node.schedulable,
                ready=node.ready,
                used_gpus=frozenset(g for g in used.get(name, frozenset()) if g < topology.gpu_count),
                driver_version=topology.system.driver_version,
            )
        )
    return Snapshot(infos, tiers, cache)
