"""The merge patch that writes a TrainingJob's whole status: a field the new status lacks is removed."""

from __future__ import annotations

from gputopo.api.preemption import NodeGpus, NominationStatus
from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.kube.client import status_patch


def test_a_cleared_nomination_and_placement_are_removed_by_the_patch() -> None:
    patch = status_patch(TrainingJobStatus(phase=JobPhase.RUNNING))["status"]
    for field in ("nomination", "preemption", "placement", "startTime", "completionTime", "lastRestartTime"):
        assert field in patch and patch[field] is None, field


def test_a_nomination_is_written_whole() -> None:
    nomination = NominationStatus(gpus=[NodeGpus(node="n0", gpus=[0, 1])], victims=["a/b"], domain="n0")
    patch = status_patch(TrainingJobStatus(nomination=nomination))["status"]
    assert patch["nomination"] == {"gpus": [{"node": "n0", "gpus": [0, 1]}], "victims": ["a/b"], "domain": "n0"}
