"""The cluster as ``kubectl gputopo`` reads it: the objects listed once, parsed as the operator parses them.

One list of each kind is one consistent-enough picture for a person's question; the snapshot counts GPUs used
exactly as the operator's does (``build_snapshot``), with the plans the TrainingJobs' and GangPlacements'
statuses hold in place of the operator's ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gputopo.control.facts import JobFacts, TopologyFacts, job_facts, node_facts, pod_facts
from gputopo.control.gangrecords import GangRecord, planned_from_records, record_facts
from gputopo.control.ledger import PlannedGang
from gputopo.control.podgpus import pod_gpus_facts
from gputopo.control.priority import PriorityClassFacts, priority_class_facts
from gputopo.control.topologies import topology_facts
from gputopo.control.view import ClusterView, build_snapshot
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import Snapshot, TierConfig

__all__ = ["ACTIVE_PHASES", "LiveCluster", "LiveObjects", "TopologyMemo", "job_plan", "live_cluster"]

# A TrainingJob in these phases holds the GPUs of its status's placement.
ACTIVE_PHASES = frozenset({"Placing", "Running", "Rescheduling"})

Body = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LiveObjects:
    """The bodies of one listing of each kind, as the API server returned them."""

    nodes: Sequence[Body] = ()
    topologies: Sequence[Body] = ()
    pods: Sequence[Body] = ()
    jobs: Sequence[Body] = ()
    gangs: Sequence[Body] = ()
    priority_classes: Sequence[Body] = ()
    pod_gpus: Sequence[Body] = ()


@dataclass(frozen=True, slots=True)
class LiveCluster:
    view: ClusterView
    jobs: tuple[JobFacts, ...]
    gangs: tuple[GangRecord, ...]
    snapshot: Snapshot
    now: datetime
    classes: Mapping[str, PriorityClassFacts] = field(default_factory=dict)
    # What is worked out once per listing and asked for many times (the running gangs, as preemption reads them).
    memo: dict[str, Any] = field(default_factory=dict, compare=False)

    def job(self, namespace: str, name: str) -> JobFacts | None:
        return next((j for j in self.jobs if (j.namespace, j.name) == (namespace, name)), None)

    def gang(self, namespace: str, name: str) -> GangRecord | None:
        """A GangPlacement by its object name, or by its gang's ``<source>/<name>``."""
        return next((g for g in self.gangs if g.key[0] == namespace and name in (g.name, g.key[1])), None)


def _name(body: Body) -> str:
    meta = body.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def job_plan(job: JobFacts) -> PlannedGang | None:
    placement = job.status.placement
    if placement is None or job.status.phase not in ACTIVE_PHASES or not placement.workers:
        return None
    return PlannedGang(job.key, placement.generation, tuple((w.node, tuple(w.gpus)) for w in placement.workers))


# (name, resourceVersion) of a NodeTopology -> its parsed facts: what a reader that lists again and again (the map)
# keeps, so only the NodeTopologies that changed are parsed again.
TopologyMemo = MutableMapping[tuple[str, str], TopologyFacts]


def _topologies(bodies: Sequence[Body], memo: TopologyMemo | None) -> dict[str, TopologyFacts]:
    if memo is None:
        return {f.name: f for f in map(topology_facts, bodies) if f.name}
    out: dict[str, TopologyFacts] = {}
    seen: set[tuple[str, str]] = set()
    for body in bodies:
        meta = body.get("metadata")
        version = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
        key = (_name(body), version)
        found = memo.get(key) if version else None
        if found is None:
            found = topology_facts(body)
            if version:
                memo[key] = found
        seen.add(key)
        if found.name:
            out[found.name] = found
    for stale in [k for k in memo if k not in seen]:
        del memo[stale]
    return out


def live_cluster(
    objects: LiveObjects,
    tiers: TierConfig,
    now: datetime,
    memo: TopologyMemo | None = None,
    cache: PlacementCache | None = None,
) -> LiveCluster:
    """The objects parsed, and the placement engine's snapshot of them; odd objects are skipped, never raised.
    ``memo`` keeps parsed NodeTopologies, and ``cache`` what the engine worked out about them, from one call to the
    next (as the operator keeps its own between passes)."""
    topologies = _topologies(objects.topologies, memo)
    nodes = {f.name: f for f in map(node_facts, objects.nodes) if f.name}
    pods = tuple(p for p in map(pod_facts, objects.pods) if p.gpus_requested or p.holder is not None)
    classes = {c.name: c for c in map(priority_class_facts, objects.priority_classes) if c is not None}
    pod_gpus = {_name(b): pod_gpus_facts(_name(b), b, None, now) for b in objects.pod_gpus if _name(b)}
    view = ClusterView(topologies, nodes, pods, pod_gpus=pod_gpus, priority_classes=classes)
    jobs = tuple(sorted(map(job_facts, objects.jobs), key=lambda j: (j.namespace, j.name)))
    gangs = tuple(sorted((r for r in map(record_facts, objects.gangs) if r is not None), key=lambda r: r.key))
    planned = [p for p in map(job_plan, jobs) if p is not None] + planned_from_records(gangs)
    snapshot = build_snapshot(view, planned, tiers, cache=cache)
    return LiveCluster(view, jobs, gangs, snapshot, now, classes)
