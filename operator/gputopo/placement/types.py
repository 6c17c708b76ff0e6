"""The placement contract: the cluster snapshot the engine reads, the request, and its result.

A ``Snapshot`` is immutable. ``reserve``/``release`` hand back a new snapshot that shares everything that
did not change (labels, tier domains, the per-node group cache), so the simulator and the operator's
ledger can step through many decisions without copying 10,000 nodes' topologies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from gputopo.api.labels import LABEL_GFD_CLIQUE, LABEL_NVLINK_CLIQUE
from gputopo.api.trainingjob import IntraNode, PlacementStatus, TrainingJobSpec
from gputopo.api.trainingjob import WorkerPlacement as ApiWorkerPlacement
from gputopo.placement.cache import PlacementCache
from gputopo.placement.constraints import (
    NodeSelectorTerm,
    Taint,
    Toleration,
)
from gputopo.placement.template import pod_constraints
from gputopo.topology.fabric import node_domain
from gputopo.topology.memo import Memo
from gputopo.topology.model import Topology

__all__ = [
    "DEFAULT_DOMAIN_NODE_CAP",
    "DEFAULT_TIERS",
    "GpuChoice",
    "NodeInfo",
    "Placement",
    "Policy",
    "Request",
    "Snapshot",
    "TierConfig",
    "TierLevel",
    "Unplaceable",
    "WorkerAssignment",
    "plural",
]


def plural(count: int, noun: str) -> str:
    """``1 node``, ``2 nodes``: a count with its noun in the right number (nouns ending in s take es)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{count} {noun}s"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One GPU node as the engine sees it; ``used_gpus`` are held by pods or reserved by earlier plans."""

    name: str
    topology: Topology
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    ready: bool = True
    used_gpus: frozenset[int] = frozenset()
    driver_version: str = ""

    @property
    def free_gpus(self) -> frozenset[int]:
        return frozenset(range(self.topology.gpu_count)) - self.used_gpus

    @property
    def gpu_model(self) -> str:
        return self.topology.gpu_model

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def nvlink_domain(self) -> str:
        """The node's multi-node NVLink domain (an NVL72 rack's clique), '' when it is in none.

        GPU Feature Discovery's ``nvidia.com/gpu.clique`` label, else the probe's ``gputopo.io/nvlink.clique``,
        else what the topology's fabric info says (the GFD rule, ``gputopo.topology.fabric.node_domain``). GFD's
        label wins: it is NVIDIA's, set by the GPU Operator's own daemon, and what Kueue TAS, topograph and
        JobSets already group by; the probe's label only stands in where GFD does not run.
        """
        return (
            self.labels.get(LABEL_GFD_CLIQUE)
            or self.labels.get(LABEL_NVLINK_CLIQUE)
            or node_domain(self.topology).clique
        )


# Nodes of one multi-node NVLink domain in use at once: 16 of an NVL72 rack's 18 trays.
DEFAULT_DOMAIN_NODE_CAP = 16


@dataclass(frozen=True, slots=True)
class TierLevel:
    """A node-label key naming a node's switch at one network tier, and that tier's oversubscription."""

    label: str
    oversubscription: float = 1.0


@dataclass(frozen=True, slots=True)
class TierConfig:
    """Network tiers, lowest (closest to the nodes) first."""

    levels: tuple[TierLevel, ...] = (
        TierLevel("fabric.topograph.run/tier-0", 1.0),
        TierLevel("fabric.topograph.run/tier-1", 2.0),
    )
    # Oversubscription a gang pays when its nodes share no switch of any configured tier.
    beyond_top: float = 4.0
    # Nodes of one multi-node NVLink domain that may be in use at once (16 of an NVL72 rack's 18 trays), so
    # a tray that fails has spares to move to.
    domain_node_cap: int = DEFAULT_DOMAIN_NODE_CAP

    def __len__(self) -> int:
        return len(self.levels)

    def oversubscription(self, tier: int) -> float:
        """The factor at ``tier``; ``len(self)`` stands for "spans the top tier"."""
        return self.levels[tier].oversubscription if tier < len(self.levels) else self.beyond_top

    def unknown_tiers(self, required: int | None, preferred: int | None) -> tuple[str, ...]:
        """Why a gang's tier fields name tiers this cluster lacks (refused, never clamped), one line each.

        The operator marks such a job Invalid with these words and ``plan`` refuses it with them.
        """
        top = len(self.levels) - 1
        known = f"tiers 0..{top}" if top > 0 else "tier 0" if top == 0 else "no tiers"
        return tuple(
            f"topology.interNode.{field} {tier} names a tier this cluster does not have "
            f"(it has {plural(len(self.levels), 'network tier')}: {known})"
            for field, tier in (("requiredTier", required), ("preferredTier", preferred))
            if tier is not None and tier > top
        )

    def domains(self, node: NodeInfo) -> tuple[str, ...]:
        """The node's switch at each tier, lowest first, each named by its path from the top tier down.

        Label values name a switch only within its parent: many clusters call a rack ``rack-1`` in every
        block, so a tier-k domain is its value together with the values of every tier above it
        (``block-2/rack-1``). A tier whose label the node lacks is an empty part of the path above it, and
        the node is alone in that tier itself (``node/<name>``).
        """
        values = [node.labels.get(level.label) or "" for level in self.levels]
        named: list[str] = []
        for tier, value in enumerate(values):
            if not value:
                named.append(f"node/{node.name}")
                continue
            named.append("/".join(reversed(values[tier:])).lstrip("/"))
        return tuple(named)


DEFAULT_TIERS = TierConfig()


class Snapshot:
    """An immutable view of the GPU nodes for one placement decision."""

    __slots__ = ("_cache", "_domains", "_index", "_memo", "_nodes", "_nvlink", "tiers")

    def __init__(
        self, nodes: Iterable[NodeInfo], tiers: TierConfig = DEFAULT_TIERS, cache: PlacementCache | None = None
    ) -> None:
        self._nodes: tuple[NodeInfo, ...] = tuple(nodes)
        self._index: dict[str, int] = {n.name: i for i, n in enumerate(self._nodes)}
        if len(self._index) != len(self._nodes):
            raise ValueError("node names in a snapshot must be unique")
        self.tiers = tiers
        self._domains: tuple[tuple[str, ...], ...] | None = None
        self._nvlink: tuple[str, ...] | None = None
        # Derived data keyed on (topology identity, free set, …); valid across reserve/release, and across
        # snapshots given the same cache.
        self._cache = cache if cache is not None else PlacementCache()
        self._cache.keep(n.topology for n in self._nodes)
        self._memo = Memo()

    @classmethod
    def _derive(cls, parent: Snapshot, nodes: tuple[NodeInfo, ...]) -> Snapshot:
        child = cls.__new__(cls)
        child._nodes = nodes
        child._index = parent._index
        child.tiers = parent.tiers
        child._domains = parent._domains
        child._nvlink = parent._nvlink
        child._cache = parent._cache
        child._memo = Memo()
        return child

    # -- queries --------------------------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def node(self, name: str) -> NodeInfo:
        return self._nodes[self._index[name]]

    def index_of(self, name: str) -> int:
        return self._index[name]

    @property
    def domains(self) -> tuple[tuple[str, ...], ...]:
        """Per node (in snapshot order), its switch at each tier, lowest first."""
        if self._domains is None:
            labels = [level.label for level in self.tiers.levels]
            # Nodes with every tier's label are named by the labels' values alone: work each out once.
            by_values: dict[tuple[str, ...], tuple[str, ...]] = {}
            named: list[tuple[str, ...]] = []
            for node in self._nodes:
                values = tuple([node.labels.get(label) or "" for label in labels])
                found = by_values.get(values)
                if found is None:
                    found = self.tiers.domains(node)
                    if all(values):
                        by_values[values] = found
                named.append(found)
            self._domains = tuple(named)
        return self._domains

    @property
    def nvlink_domains(self) -> tuple[str, ...]:
        """Per node (in snapshot order), its multi-node NVLink domain ('' for none)."""
        if self._nvlink is None:
            self._nvlink = tuple(n.nvlink_domain for n in self._nodes)
        return self._nvlink

    @property
    def cache(self) -> PlacementCache:
        """Memo of derived, snapshot-independent data (subset scores, group searches per node class)."""
        return self._cache

    @property
    def memo(self) -> Memo:
        """Values derived from this snapshot's nodes as they are (which GPUs are used included), kept while the
        snapshot lives: a gang placed again on it finds its candidates and domain summaries built. Snapshots
        derived by ``reserve``/``release``/``with_node`` start their own."""
        return self._memo

    @property
    def total_gpus(self) -> int:
        return sum(n.topology.gpu_count for n in self._nodes)

    @property
    def used_gpus(self) -> int:
        return sum(len(n.used_gpus) for n in self._nodes)

    # -- changes (each returns a new Snapshot) ------------------------------------------------------------

    def _with_gpus(self, placement: Placement, *, take: bool) -> Snapshot:
        nodes = list(self._nodes)
        for worker in placement.workers:
            i = self._index[worker.node]
            node = nodes[i]
            gpus = frozenset(worker.gpus)
            if take and gpus & node.used_gpus:
                raise ValueError(f"{worker.node}: GPUs {sorted(gpus & node.used_gpus)} are already used")
            used = node.used_gpus | gpus if take else node.used_gpus - gpus
            nodes[i] = replace(node, used_gpus=used)
        return Snapshot._derive(self, tuple(nodes))

    def reserve(self, placement: Placement) -> Snapshot:
        """The snapshot with the placement's GPUs taken."""
        return self._with_gpus(placement, take=True)

    def release(self, placement: Placement) -> Snapshot:
        """The snapshot with the placement's GPUs given back (the undo of ``reserve``)."""
        return self._with_gpus(placement, take=False)

    def part(self, indices: Sequence[int], nodes: Mapping[int, NodeInfo] | None = None) -> Snapshot:
        """The snapshot of the nodes at ``indices`` only, in that order; ``nodes`` replaces some of them by
        index with the same node in another state of use (same labels and topology). It shares this
        snapshot's cache and per-node switch and NVLink domain names, so a search over many parts of a large
        cluster (preemption's candidate domains) pays for them once."""
        changed = nodes or {}
        child = Snapshot.__new__(Snapshot)
        child._nodes = tuple(changed.get(i) or self._nodes[i] for i in indices)
        child._index = {n.name: j for j, n in enumerate(child._nodes)}
        child.tiers = self.tiers
        child._domains = tuple(self.domains[i] for i in indices)
        child._nvlink = tuple(self.nvlink_domains[i] for i in indices)
        child._cache = self._cache
        child._memo = Memo()
        return child

    def with_node(self, node: NodeInfo) -> Snapshot:
        """The snapshot with one node replaced (same name), e.g. after a link went down."""
        nodes = list(self._nodes)
        nodes[self._index[node.name]] = node
        child = Snapshot._derive(self, tuple(nodes))
        child._cache.keep((node.topology,))  # a new model the shared cache may outlive
        old = self._nodes[self._index[node.name]]
        if node.labels != old.labels:
            child._domains = None
        if node.labels != old.labels or node.topology is not old.topology:
            child._nvlink = None
        return child


class GpuChoice(StrEnum):
    """Who picks a worker's GPUs within its node, so the engine plans (and scores) what the worker gets."""

    PLANNED = "planned"  # gputopo's best groups: the cluster is bound to the plan (DRA claims)
    # NVIDIA's device plugin: its best-effort policy on the node's free GPUs, one rank after another
    # (``gputopo.topology.device_plugin``), since the kubelet never sees the plan.
    DEVICE_PLUGIN = "devicePlugin"


@dataclass(frozen=True)
class Request:
    """What a gang needs: ``workers`` times ``gpus_per_worker`` GPUs and where they may be."""

    workers: int
    gpus_per_worker: int
    name: str = ""
    intra_node: IntraNode = IntraNode.ANY
    min_busbw_gbps: float = 0.0
    required_tier: int | None = None
    preferred_tier: int | None = None
    gpu_model: str | None = None
    same_model: bool = True
    same_driver: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    slice_size: int | None = None
    gpu_choice: GpuChoice = GpuChoice.PLANNED

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @classmethod
    def from_spec(cls, spec: TrainingJobSpec, *, name: str = "", gpu_choice: GpuChoice = GpuChoice.PLANNED) -> Request:
        """The request of a TrainingJob spec; a pod template field of the wrong shape raises ``TemplateError``."""
        pod = pod_constraints(spec.template)
        topo = spec.topology
        return cls(
            workers=spec.workers,
            gpus_per_worker=spec.gpus_per_worker,
            name=name,
            intra_node=topo.intra_node,
            min_busbw_gbps=topo.min_bus_bandwidth_g_bps,
            required_tier=topo.inter_node.required_tier,
            preferred_tier=topo.inter_node.preferred_tier,
            gpu_model=spec.gpu.model or None,
            same_model=spec.gpu.same_model,
            same_driver=spec.gpu.same_driver,
            node_selector=pod.node_selector,
            affinity_terms=pod.affinity_terms,
            tolerations=pod.tolerations,
            slice_size=topo.slice_size,
            gpu_choice=gpu_choice,
        )


@dataclass(frozen=True, slots=True)
class WorkerAssignment:
    rank: int
    node: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each rank runs, and the gang's estimated all-reduce bus bandwidth.

    ``tier`` is the lowest network tier with one switch (``tier_domain``) above every node of the gang;
    ``None`` when the gang spans the top tier.
    """

    workers: tuple[WorkerAssignment, ...]
    busbw_gbps: float
    bottleneck: str
    tier: int | None = None
    tier_domain: str | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(w.node for w in self.workers)

    @property
    def gpu_count(self) -> int:
        return sum(len(w.gpus) for w in self.workers)

    def to_api(self, generation: int = 0) -> PlacementStatus:
        return PlacementStatus(
            generation=generation,
            estimatedBusBandwidthGBps=round(self.busbw_gbps, 3),
            bottleneck=self.bottleneck,
            workers=[
                ApiWorkerPlacement(rank=w.rank, node=w.node, gpus=list(w.gpus), nics=list(w.nics)) for w in self.workers
            ],
        )


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """Why a gang cannot be placed now, in words a user can act on; ``details`` add per-filter counts."""

    reason: str
    details: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.reason if not self.details else f"{self.reason} ({'; '.join(self.details)})"


class Policy(Protocol):
    """A placement policy: the engine's ``place``, a peer policy, or a test's stand-in."""

    def __call__(self, snapshot: Snapshot, request: Request, /) -> Placement | Unplaceable: ...
