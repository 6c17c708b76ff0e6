"""The operator's words for a wait, turned into one ranked set of pending reasons (Kueue's where it has them)."""

from __future__ import annotations

import pytest

from gputopo.control.explain.reasons import PendingReason, gang_reason, job_reason, rank_of

JOB_CASES = [
    ("InvalidSpec", PendingReason.MISCONFIGURED),
    ("KueueNotInstalled", PendingReason.MISCONFIGURED),
    ("WaitingForKueue", PendingReason.WAITING_FOR_QUOTA),
    ("KueueEvicted", PendingReason.WAITING_FOR_QUOTA),
    ("Unplaceable", PendingReason.TOPOLOGY_PLACEMENT_FAILED),
    ("WaitingForCapacity", PendingReason.TOPOLOGY_PLACEMENT_FAILED),
    ("PlacementTimedOut", PendingReason.TOPOLOGY_PLACEMENT_FAILED),
    ("Preempting", PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS),
    ("WaitingForCheckpoint", PendingReason.WAITING_FOR_CHECKPOINT),
    ("WaitingForOldPods", PendingReason.WAITING_FOR_PODS),
    ("Placed", None),
]


@pytest.mark.parametrize(("condition", "expected"), JOB_CASES, ids=[c for c, _ in JOB_CASES])
def test_job_reason(condition: str, expected: PendingReason | None) -> None:
    assert job_reason(condition) == expected


GANG_CASES = [
    ("refused", "Refused", "annotation gputopo.io/intra-node: bad", PendingReason.MISCONFIGURED),
    ("unplaceable", "Unplaceable", "needs 2 nodes with 8 free GPUs", PendingReason.TOPOLOGY_PLACEMENT_FAILED),
    (
        "size-unknown",
        "Pending",
        "its size is not known yet (its owner is not read yet, or does not say)",
        PendingReason.WAITING_FOR_RANKS,
    ),
    ("no-pod", "Pending", "no pod of the gang exists", PendingReason.WAITING_FOR_RANKS),
    (
        "other-gate",
        "Pending",
        "waiting for example.com/gate to be removed before planning",
        PendingReason.WAITING_FOR_OTHER_GATES,
    ),
    (
        "victims",
        "Pending",
        "waiting for default/low to end: their GPUs are held for it",
        PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
    ),
    (
        "checkpoint",
        "Pending",
        "waiting for the next checkpoint of default/low at 12:00",
        PendingReason.WAITING_FOR_CHECKPOINT,
    ),
    ("kueue-tas", "PlacedByKueue", "Kueue admitted it", PendingReason.PLACED_BY_KUEUE),
    ("planned", "Planned", "waiting for kube-scheduler to bind", PendingReason.WAITING_FOR_PODS),
    ("ranks-to-come", "Planned", "waiting for ranks 1, 2 to be created", PendingReason.WAITING_FOR_RANKS),
    (
        "ranks-late",
        "Released",
        "ranks 1 did not arrive within 120s of the plan: its GPUs are let go",
        PendingReason.WAITING_FOR_RANKS,
    ),
    ("running", "Running", "", None),
    ("released", "Released", "every pod of the gang has ended", None),
]


@pytest.mark.parametrize(("phase", "message", "expected"), [c[1:] for c in GANG_CASES], ids=[c[0] for c in GANG_CASES])
def test_gang_reason(phase: str, message: str, expected: PendingReason | None) -> None:
    assert gang_reason(phase, message) == expected


def test_misconfiguration_ranks_first_and_a_checkpoint_wait_late() -> None:
    ranks = sorted(PendingReason, key=rank_of)
    assert ranks[0] is PendingReason.MISCONFIGURED
    assert rank_of(PendingReason.WAITING_FOR_QUOTA) < rank_of(PendingReason.TOPOLOGY_PLACEMENT_FAILED)
    assert rank_of(PendingReason.TOPOLOGY_PLACEMENT_FAILED) < rank_of(PendingReason.WAITING_FOR_CHECKPOINT)
