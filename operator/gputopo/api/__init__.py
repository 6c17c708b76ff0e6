"""API types of gputopo.io/v1alpha1: the source of truth for the CRDs in crds/."""

from gputopo.api.conditions import Condition, set_condition
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
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "WorkerPlacement",
    "set_condition",
]
