"""Why a gang waits, in Kueue's words where the meaning is the same, ranked by what must be fixed first.

The operator says why in a condition (a TrainingJob's ``Placed`` reason) or a phase and message (a GangPlacement).
Kueue's ``QuotaReserved`` reasons (``WaitingForQuota``, ``TopologyPlacementFailed``, ``Misconfigured``,
``WaitingForPreemptedWorkloads``) name the same things; the waits Kueue has no word for (ranks still to arrive,
another scheduler's gate, a victim's checkpoint) keep gputopo's own.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["PendingReason", "gang_reason", "job_reason", "rank_of"]


class PendingReason(StrEnum):
    MISCONFIGURED = "Misconfigured"  # the spec, its priority class or Kueue's API: nothing runs until it is fixed
    WAITING_FOR_QUOTA = "WaitingForQuota"  # Kueue has not admitted it (or evicted it)
    WAITING_FOR_RANKS = "WaitingForRanks"  # the gang's size or some of its pods are not there yet
    WAITING_FOR_OTHER_GATES = "WaitingForOtherGates"  # another scheduler's gate is still on its pods
    TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"  # no placement meets its topology needs now
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"  # its victims are ending; GPUs held for it
    WAITING_FOR_CHECKPOINT = "WaitingForCheckpoint"  # it waits for its victims' next checkpoint before preempting
    WAITING_FOR_PODS = "WaitingForPods"  # placed: its pods are being bound, or the old gang is terminating
    PLACED_BY_KUEUE = "PlacedByKueue"  # Kueue's Topology-Aware Scheduling places it, not gputopo


_RANK = {reason: i for i, reason in enumerate(PendingReason)}

# A TrainingJob's Placed=False (or True while pods wait) reasons, as lifecycle.py writes them.
_JOB = {
    "InvalidSpec": PendingReason.MISCONFIGURED,
    "KueueNotInstalled": PendingReason.MISCONFIGURED,
    "WaitingForKueue": PendingReason.WAITING_FOR_QUOTA,
    "KueueEvicted": PendingReason.WAITING_FOR_QUOTA,
    "Unplaceable": PendingReason.TOPOLOGY_PLACEMENT_FAILED,
    "WaitingForCapacity": PendingReason.TOPOLOGY_PLACEMENT_FAILED,
    "PlacementTimedOut": PendingReason.TOPOLOGY_PLACEMENT_FAILED,
    "Preempting": PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
    "WaitingForCheckpoint": PendingReason.WAITING_FOR_CHECKPOINT,
    "WaitingForOldPods": PendingReason.WAITING_FOR_PODS,
}


def rank_of(reason: PendingReason) -> int:
    """0 for the reason to fix first: a misconfigured gang waits for nothing else."""
    return _RANK[reason]


def job_reason(condition_reason: str) -> PendingReason | None:
    """The pending reason of a TrainingJob's ``Placed`` condition reason; None for one that is not a wait."""
    return _JOB.get(condition_reason)


def gang_reason(phase: str, message: str) -> PendingReason | None:
    """The pending reason of a GangPlacement's phase and message; None for a gang that does not wait."""
    if phase == "Refused":
        return PendingReason.MISCONFIGURED
    if phase == "Unplaceable":
        return PendingReason.TOPOLOGY_PLACEMENT_FAILED
    if phase == "PlacedByKueue":
        return PendingReason.PLACED_BY_KUEUE
    if phase == "Planned":  # its plan holds GPUs: for ranks still to be made, or for their binding
        return (
            PendingReason.WAITING_FOR_RANKS
            if message.startswith("waiting for ranks")
            else PendingReason.WAITING_FOR_PODS
        )
    if phase == "Released":  # let go for want of ranks that did not arrive; planned again when they do
        return PendingReason.WAITING_FOR_RANKS if "did not arrive within" in message else None
    if phase not in ("Pending", "Preempted"):
        return None
    if message.startswith("waiting for") and message.endswith("to end: their GPUs are held for it"):
        return PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
    if "checkpoint" in message:
        return PendingReason.WAITING_FOR_CHECKPOINT
    if message.endswith("to be removed before planning"):
        return PendingReason.WAITING_FOR_OTHER_GATES
    if "size is not known" in message or "no pod of the gang" in message:
        return PendingReason.WAITING_FOR_RANKS
    return PendingReason.TOPOLOGY_PLACEMENT_FAILED if phase == "Preempted" else PendingReason.WAITING_FOR_RANKS
