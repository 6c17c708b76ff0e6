"""gputopo.placement: the pure gang placement engine the operator runs; no I/O, and no simulator or reference.

Snapshot, request, candidate groups, gang placement, scores and explanations. What only the CLI, the
benchmarks and the tests use (simulator, trace generators, peer policies, exact reference) is ``gputopo.sim``.
"""

from gputopo.placement.constraints import (
    NodeSelectorOperator,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
)
from gputopo.placement.engine import place
from gputopo.placement.types import (
    DEFAULT_TIERS,
    GpuChoice,
    NodeInfo,
    Placement,
    Policy,
    Request,
    Snapshot,
    TierConfig,
    TierLevel,
    Unplaceable,
    WorkerAssignment,
)

__all__ = [
    "DEFAULT_TIERS",
    "GpuChoice",
    "NodeInfo",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Placement",
    "Policy",
    "Request",
    "Snapshot",
    "Taint",
    "TaintEffect",
    "TierConfig",
    "TierLevel",
    "Toleration",
    "Unplaceable",
    "WorkerAssignment",
    "place",
]
