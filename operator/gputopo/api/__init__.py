"""gputopo.api: the types of gputopo.io/v1alpha1 (the source of truth for crds/); it imports no other room.

Pydantic models of the CRDs, labels, annotations and the cluster and trace files' schema; below every other
package, so it may import nothing of gputopo but the error root (``gputopo.errors``).
"""

from gputopo.api.conditions import Condition, set_condition
from gputopo.api.gangplacement import (
    GangPhase,
    GangPlacement,
    GangPlacementSpec,
    GangPlacementStatus,
    GangSource,
    RankPlacement,
)
from gputopo.api.group import API_VERSION, GROUP, VERSION
from gputopo.api.nodetopology import (
    GpuHealthState,
    GpuStatus,
    LinkKind,
    LinkState,
    LinkStatus,
    NicState,
    NicStatus,
    NodeTopology,
    NodeTopologyStatus,
)
from gputopo.api.trainingjob import (
    FailurePolicy,
    IntraNode,
    JobPhase,
    LinkFailureAction,
    PlacementStatus,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
    WorkerPlacement,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "Condition",
    "FailurePolicy",
    "GangPhase",
    "GangPlacement",
    "GangPlacementSpec",
    "GangPlacementStatus",
    "GangSource",
    "GpuHealthState",
    "GpuStatus",
    "IntraNode",
    "JobPhase",
    "LinkFailureAction",
    "LinkKind",
    "LinkState",
    "LinkStatus",
    "NicState",
    "NicStatus",
    "NodeTopology",
    "NodeTopologyStatus",
    "PlacementStatus",
    "RankPlacement",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "WorkerPlacement",
    "set_condition",
]
