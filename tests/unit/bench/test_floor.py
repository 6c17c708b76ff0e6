"""The floor sides of bench_allocation write what they say: the operator's own pod bodies, with
the status writes of their side (bench/floor.py; pure, no API server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from floor import FLOOR_SIDES, GangWrites, gang_writes
from gputopo.api.group import GPU_RESOURCE
from gputopo.api.trainingjob import JobPhase, TrainingJobSpec
from gputopo.control.kueue_quota import workload_manifest
from gputopo.sandbox.harness import training_job


def _status(workers: int) -> dict[str, Any]:
    return {
        "phase": "Running",
        "placement": {
            "generation": 1,
            "estimatedBusBandwidthGBps": 100.0,
            "workers": [{"rank": r, "node": f"node-{r}", "gpus": [0, 1, 2, 3]} for r in range(workers)],
        },
    }


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


@pytest.mark.parametrize("side", FLOOR_SIDES)
def test_a_gang_s_writes_are_the_operator_s_pods_and_the_side_s_statuses(side: str) -> None:
    spec = training_job("j", "ns", workers=2, gpusPerWorker=4)["spec"]
    gang = gang_writes(side, "ns", "j", spec, _status(2))
    assert gang is not None
    assert [p["metadata"]["name"] for p in gang.pods] == ["j-0", "j-1"]
    for rank, pod in enumerate(gang.pods):
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert f"node-{rank}" in str(terms)
        assert pod["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "4"
        assert _gates(pod) == []  # as the operator creates them
    assert gang.service is not None and gang.service["metadata"]["name"] == "j"
    assert (gang.placing is not None) is (side == "replay")
    if side == "pinned":
        assert gang.running is None
    else:
        assert gang.running is not None and gang.running.phase is JobPhase.RUNNING
        assert gang.running.placement is not None and len(gang.running.placement.workers) == 2


def test_one_worker_has_no_gate_and_no_service() -> None:
    spec = training_job("solo", "ns", workers=1, gpusPerWorker=4)["spec"]
    gang = gang_writes("replay", "ns", "solo", spec, _status(1))
    assert gang is not None
    assert gang.service is None and _gates(gang.pods[0]) == []


def test_a_job_the_operator_never_placed_gets_no_writes() -> None:
    spec = training_job("j", "ns", workers=2, gpusPerWorker=4)["spec"]
    assert gang_writes("minimal", "ns", "j", spec, {"phase": "Pending"}) is None


def test_an_unknown_side_is_refused() -> None:
    with pytest.raises(ValueError, match="not a floor side"):
        gang_writes("devicePlugin", "ns", "j", training_job("j", "ns")["spec"], _status(1))


def test_a_queued_job_s_writes_wait_for_the_operator_s_own_workload() -> None:
    spec = training_job("j", "ns", workers=2, gpusPerWorker=4)["spec"]
    gang = gang_writes("minimal", "ns", "j", spec, _status(2), queue="gpus")
    assert gang is not None and gang.queue == "gpus"
    assert GangWrites.from_json(gang.to_json()) == gang
    workload = gang.workload("ns", "j", "uid-1", 1)
    parsed = TrainingJobSpec.model_validate(spec)
    assert workload == workload_manifest("ns", "j", "uid-1", 1, parsed, "gpus", 0)
    assert workload["spec"]["queueName"] == "gpus" and workload["spec"]["podSets"][0]["count"] == 2


def test_a_job_in_no_queue_has_no_workload() -> None:
    gang = gang_writes("minimal", "ns", "j", training_job("j", "ns")["spec"], _status(1))
    assert gang is not None and gang.queue is None
    with pytest.raises(ValueError, match="wait for no queue"):
        gang.workload("ns", "j", "uid-1", 1)
