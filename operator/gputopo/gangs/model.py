"""One gang model for every source: pods with ranks, an all-or-nothing size, per-rank GPU shapes and needs.

A source (``gputopo.gangs.sources``) reads a pod and the objects it belongs to (its PodGroup, Job, JobSet,
LeaderWorkerSet or PyTorchJob) and says which gang the pod is a member of, at which rank, and what the gang
declares: how many pods it has in all and how many GPUs each rank takes. The declared shape comes from the
owner's templates, so a gang can be planned whole when its first pod arrives, before the others exist.

Pure: plain data in, plain data out; nothing here talks to the API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from gputopo.api.trainingjob import IntraNode
from gputopo.gangs.unbound import Refusal
from gputopo.placement.template import PodConstraints

__all__ = [
    "GATE",
    "NO_CONSTRAINTS",
    "Declared",
    "DisruptionMode",
    "Gang",
    "GangId",
    "Member",
    "Needs",
    "OwnerRef",
    "Source",
]

# The scheduling gate gputopo's admission policy gives GPU pods of gangs, and removes once they are placed.
GATE: Final = "gputopo.io/placement"

# Where a gang was read from. "gputopo" is the plain pod contract (labels gputopo.io/gang, gputopo.io/gang-size).
Source = Literal["podgroup", "gputopo", "kueue", "jobset", "leaderworkerset", "pytorchjob", "job"]

# How a fault under one member disrupts the gang: PodGroup's disruptionMode. "all": every member goes together.
DisruptionMode = Literal["single", "all"]

# A pod with no node selector, no required node affinity and no tolerations.
NO_CONSTRAINTS: Final = PodConstraints({}, (), ())


@dataclass(frozen=True, slots=True, order=True)
class GangId:
    """A gang's identity: its namespace, its source and the name that source gives it (a PodGroup's name, a
    JobSet's name, a LeaderWorkerSet's name plus group index, ...)."""

    namespace: str
    source: Source
    name: str

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, "<source>/<name>"): never equal to a TrainingJob's (namespace, name), since object
        names cannot hold a slash."""
        return (self.namespace, f"{self.source}/{self.name}")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.source}/{self.name}"


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The object that recreates the gang's pods (the pods' controller, or the object above it that the gang
    is named after); ``None`` on a gang of bare pods."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Needs:
    """A gang's topology needs. Tiers may be named by index or by node label key (a PodGroup's topology
    constraint, Kueue TAS's podset-required-topology): ``resolve`` turns label keys into tier indices."""

    intra_node: IntraNode = IntraNode.ANY
    required_tier: int | None = None
    preferred_tier: int | None = None
    required_label: str | None = None
    preferred_label: str | None = None
    min_busbw_gbps: float = 0.0
    slice_size: int | None = None
    # JobSet exclusive topology: each child Job in a domain of this label of its own.
    exclusive_label: str | None = None


@dataclass(frozen=True, slots=True)
class Declared:
    """What the gang's owner declares: ``size`` pods in all (its all-or-nothing count) and ``shape[rank]``
    GPUs for each rank. ``roles[rank]`` names the rank's role ("" for a gang of one role). ``parts[rank]``
    names the part (a JobSet's child Job) an exclusive topology keeps in a domain of its own."""

    size: int
    shape: tuple[int, ...]
    roles: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()

    @property
    def gpu_ranks(self) -> tuple[int, ...]:
        return tuple(rank for rank, gpus in enumerate(self.shape) if gpus > 0)


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a gang, as it is now."""

    pod: str
    uid: str
    rank: int
    gpus: int
    gates: tuple[str, ...] = ()
    node: str | None = None  # bound
    planned: tuple[int, ...] | None = None  # gputopo.io/gpus
    phase: str = "Pending"
    deleting: bool = False
    created: datetime | None = None
    generation: int | None = None  # gputopo.io/placement-generation
    refusal: Refusal | None = None  # why kube-scheduler has not bound it (PodScheduled False), since when
    # The pod's node selector, required node affinity and tolerations: where its rank may be placed.
    constraints: PodConstraints = NO_CONSTRAINTS
    # Kueue (gputopo.gangs.kueuemarks): the Workload whose admission let the pod run ("" unnamed; None: not
    # Kueue's), and whether Kueue's Topology-Aware Scheduling places it (then gputopo never plans it).
    kueue_workload: str | None = None
    placed_by_kueue: bool = False
    # A pod of the gang that gputopo's gate never held (it asks for no GPU): read for the gang's size and ranks,
    # never steered, evicted or waited for.
    bystander: bool = False

    @property
    def gone(self) -> bool:
        """Being deleted, or failed: its controller replaces it (a Job keeps a failed pod while it makes the
        next), so another pod may hold its rank."""
        return self.deleting or self.phase == "Failed"

    @property
    def gated(self) -> bool:
        """Still held by gputopo's gate."""
        return GATE in self.gates

    @property
    def held_elsewhere(self) -> tuple[str, ...]:
        """Gates of other schedulers (Kueue's, ...): gputopo waits until they are gone."""
        return tuple(g for g in self.gates if g != GATE)


@dataclass(frozen=True, slots=True)
class Gang:
    """A gang read from one source: its declaration, its members as they are, and what was refused."""

    id: GangId
    declared: Declared | None  # None while the size is not known yet (its owner not read)
    members: tuple[Member, ...] = ()
    needs: Needs = field(default_factory=Needs)
    priority: int = 0
    owner: OwnerRef | None = None
    disruption: DisruptionMode = "all"
    evict_bare: bool = False  # gputopo.io/evict-bare-pods: bare pods may be evicted off a fault
    never_preempts: bool = False  # the group's own preemptionPolicy is Never (a PodGroup's)
    group_refusal: Refusal | None = None  # why kube-scheduler has not scheduled its PodGroup
    problems: tuple[str, ...] = ()  # why the gang is refused, each naming the field or annotation
    selector: Mapping[str, str] = field(default_factory=dict)  # node selector every member's template has
    # Where the pods' sources disagree and one was taken over another: said in the gang's status and an Event.
    disagreements: tuple[str, ...] = ()

    @property
    def by_rank(self) -> dict[int, Member]:
        """The live member of each rank (a deleting or failed pod gives way to its replacement)."""
        out: dict[int, Member] = {}
        for member in sorted(self.members, key=_age):
            out.setdefault(member.rank, member)
        return out

    def missing(self) -> tuple[int, ...]:
        """Ranks that take GPUs with no live pod yet. A rank that asks for no GPU is not waited for: the admission
        policy does not gate its pod (kube-scheduler places it as it comes), so it may never be seen."""
        if self.declared is None:
            return ()
        present = {r for r, m in self.by_rank.items() if not m.gone}
        return tuple(r for r in self.declared.gpu_ranks if r not in present)


def _age(member: Member) -> tuple[bool, float, str]:
    return (member.gone, member.created.timestamp() if member.created else 0.0, member.pod)
