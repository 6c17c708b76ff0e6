"""The GangPlacement resource: where gputopo placed a gang it does not own, and how that gang is doing.

A gang whose pods another controller makes (a PodGroup's, an Indexed Job's, a JobSet's, a LeaderWorkerSet's,
a PyTorchJob's, Kueue's pod group, or bare pods labelled ``gputopo.io/gang``) has no TrainingJob to carry its
status, so the operator keeps one GangPlacement per gang in the gang's namespace, owned by the gang's owner so
that it goes when the gang does. A gang of bare pods has no owner: its record is deleted by the operator once no pod
of the gang has been left for a while (``status.podsGoneAt``). Users read it (``kubectl get gangs``); only the
operator writes it.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field

from gputopo.api.base import NamespacedObject, StatusModel
from gputopo.api.conditions import Condition
from gputopo.api.preemption import NominationStatus, PreemptionStatus

__all__ = [
    "MAX_GANG_SIZE",
    "GangOwner",
    "GangPhase",
    "GangPlacement",
    "GangPlacementSpec",
    "GangPlacementStatus",
    "GangSource",
    "RankPlacement",
]

# The largest gang the schema accepts: 8192 GPUs at one GPU a rank, as a TrainingJob may hold.
MAX_GANG_SIZE = 8192
MAX_GPU_INDEX = 63


class GangSource(StrEnum):
    """Where the gang was read from (gputopo.gangs.model.Source)."""

    PODGROUP = "podgroup"  # a scheduling.k8s.io PodGroup named by the pods' spec.schedulingGroup
    GPUTOPO = "gputopo"  # pods labelled gputopo.io/gang
    KUEUE = "kueue"  # pods labelled kueue.x-k8s.io/pod-group-name
    JOBSET = "jobset"  # a JobSet (or a TrainJob's JobSet)
    LEADERWORKERSET = "leaderworkerset"  # one group of a LeaderWorkerSet
    PYTORCHJOB = "pytorchjob"  # a Kubeflow training-operator PyTorchJob
    JOB = "job"  # an Indexed Job


class GangPhase(StrEnum):
    PENDING = "Pending"  # seen, but not planned yet (its size unknown, or members held by another gate)
    PLANNED = "Planned"  # a plan holds the gang's GPUs; gates lifted, pods not all running yet
    RUNNING = "Running"  # every rank runs where it was planned
    RESTARTING = "Restarting"  # a fault under the gang: its pods are evicted for the owner to recreate
    UNPLACEABLE = "Unplaceable"  # no placement meets its needs now; retried as the cluster changes
    REFUSED = "Refused"  # the gang cannot be run as declared (the message names the field or annotation)
    RELEASED = "Released"  # its pods are gone or finished; the GPUs are free again
    PREEMPTED = "Preempted"  # a higher-priority gang preempted it: its pods evicted, it waits to be placed again
    PLACED_BY_KUEUE = "PlacedByKueue"  # admitted on a Kueue flavor with a topology: Kueue's TAS places its pods


class GangOwner(StatusModel):
    """The object that makes the gang's pods and owns this GangPlacement."""

    api_version: str = Field(alias="apiVersion", min_length=1, max_length=317)
    kind: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253)
    uid: str = Field(min_length=1, max_length=36)


class GangPlacementSpec(StatusModel):
    """Which gang this is; written by the operator when it first sees the gang."""

    model_config = StatusModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.source == oldSelf.source && self.gang == oldSelf.gang",
                    "message": "spec.source and spec.gang name the gang and cannot change",
                    "fieldPath": ".gang",
                }
            ]
        }
    }

    source: GangSource = Field(description="Where the gang was read from: the kind of thing that declares it.")
    gang: str = Field(
        min_length=1,
        max_length=512,
        description=(
            "The name the source gives the gang: a PodGroup's, a Job's, a JobSet's or a PyTorchJob's name, a "
            "LeaderWorkerSet's name and group index, or the value of the gputopo.io/gang or "
            "kueue.x-k8s.io/pod-group-name label."
        ),
    )
    size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GANG_SIZE,
        description="The gang's declared all-or-nothing pod count; absent until its source says.",
    )
    owner: GangOwner | None = Field(
        default=None, description="The object that makes the gang's pods; absent for a gang of bare pods."
    )


class RankPlacement(StatusModel):
    """Where one rank of the gang is placed."""

    rank: int = Field(ge=0, le=MAX_GANG_SIZE - 1)
    pod: str = Field(default="", max_length=253, description="The rank's pod, once it exists.")
    node: str = Field(max_length=253)
    gpus: list[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]] = Field(
        default_factory=list,
        max_length=MAX_GPU_INDEX + 1,
        description="Planned GPU indices on the node.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    role: str = Field(default="", max_length=63, description="The rank's role (leader, worker, ...); '' for one role.")
    nics: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=64, description="The NICs the rank's GPUs reach the fabric through."
    )


class GangPlacementStatus(StatusModel):
    """Where the gang runs and how it is doing; written by the operator."""

    model_config = StatusModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.nodeCount) || self.nodeCount == (has(self.nodes) ? size(self.nodes) : 0)",
                    "message": "status.nodeCount must be the number of status.nodes",
                    "fieldPath": ".nodeCount",
                }
            ]
        }
    }

    phase: GangPhase = Field(
        default=GangPhase.PENDING,
        description=(
            "Pending: seen, not planned yet; Planned: a plan holds its GPUs; Running: every rank runs as planned; "
            "Restarting: a fault under it, its pods evicted for the owner to recreate; Unplaceable: no placement "
            "meets its needs now; Refused: it cannot run as declared; Released: its pods are gone; Preempted: a "
            "higher-priority gang preempted it, and it waits to be placed again; PlacedByKueue: Kueue admitted it on a "
            "flavor with a topology, so Kueue's Topology-Aware Scheduling places its pods and gputopo plans none."
        ),
    )
    message: str = Field(default="", max_length=4096, description="Why the gang is in its phase, for people.")
    generation: int = Field(default=0, ge=0, description="Counts placements of this gang; 0 before the first.")
    ranks: list[RankPlacement] = Field(
        default_factory=list,
        max_length=MAX_GANG_SIZE,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["rank"]},
    )
    nodes: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        max_length=MAX_GANG_SIZE,
        description="The nodes the plan uses.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    node_count: int = Field(default=0, ge=0, description="The number of nodes, for `kubectl get gangs`.")
    gpu_count: int = Field(default=0, ge=0, description="GPUs the plan holds in all, for `kubectl get gangs`.")
    estimated_bus_bandwidth_g_bps: float = Field(
        default=0.0,
        ge=0,
        alias="estimatedBusBandwidthGBps",
        description="Estimated all-reduce bus bandwidth of the placement, GB/s.",
    )
    bottleneck: str = Field(default="", max_length=1024, description="What limits the bus bandwidth.")
    tier: int | None = Field(
        default=None, ge=0, description="The lowest network tier under one switch of which the whole gang sits."
    )
    missing_ranks: list[Annotated[int, Field(ge=0, le=MAX_GANG_SIZE - 1)]] = Field(
        default_factory=list,
        max_length=MAX_GANG_SIZE,
        description="Ranks of the declared size with no live pod yet.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    released_with: int | None = Field(
        default=None,
        ge=0,
        alias="releasedWith",
        description="Live pods when the plan was let go for want of the rest: planned again once that changes.",
    )
    restarts: int = Field(default=0, ge=0, description="Times a fault made the gang start again.")
    last_restart_reason: str = Field(default="", max_length=1024)
    planned_at: datetime | None = Field(default=None, description="When the current plan was made.")
    placed_at: datetime | None = Field(default=None, description="When every rank of the plan was running.")
    pods_gone_at: datetime | None = Field(
        default=None,
        description=(
            "When the operator found no pod of the gang left (absent while a pod of it exists). The record of a "
            "gang with no owner (bare pods) is deleted gangs.recordRetentionSeconds after; an owned gang's goes "
            "with its owner."
        ),
    )
    nomination: NominationStatus | None = Field(
        default=None, description="GPUs held for the gang while the gangs it preempts terminate."
    )
    preemption: PreemptionStatus | None = Field(default=None, description="How the gang was preempted, if it was.")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class GangPlacement(NamespacedObject):
    """A whole GangPlacement object as read from the API server."""

    kind: ClassVar[str] = "GangPlacement"
    plural: ClassVar[str] = "gangplacements"
    spec: GangPlacementSpec
    status: GangPlacementStatus = Field(default_factory=GangPlacementStatus)
