"""The PodGroup floor ways of bench_gangs steer what the operator planned, with its own patch, and write the record
only where their way says (bench/podgroup_floor.py, bench/gangs_report.py; pure, no API server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from gang_trace import Job
from gangs_report import FLOORS, KUBE, MINIMAL, PINNED, PODGROUP, summarise
from podgroup_floor import PODGROUP_FLOOR_WAYS, SteerWrites, steer_writes

OWNER = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "job-001", "uid": "u-old"}


def _placement(phase: str = "Running", ranks: int = 2) -> dict[str, Any]:
    """A GangPlacement as the operator leaves it for a 2x8 PodGroup gang."""
    return {
        "metadata": {"name": "podgroup-job-001", "namespace": "bench-gang-podgroup", "uid": "record-uid"},
        "spec": {"source": "podgroup", "gang": "job-001", "size": ranks, "owner": OWNER},
        "status": {
            "phase": phase,
            "generation": 3,
            "ranks": [
                {"rank": r, "node": f"hgx-h100-{r}", "gpus": list(range(8)), "pod": f"job-001-{r}"}
                for r in range(ranks)
            ],
            "nodes": [f"hgx-h100-{r}" for r in range(ranks)],
            "placedAt": "2026-01-01T00:00:01Z",
            "conditions": [{"type": "Placed", "status": "True"}],
        },
    }


def test_floor_ways_are_the_report_s() -> None:
    assert set(FLOORS.values()) == set(PODGROUP_FLOOR_WAYS)


@pytest.mark.parametrize("way", PODGROUP_FLOOR_WAYS)
def test_each_pod_goes_where_the_operator_planned_it(way: str) -> None:
    writes = steer_writes(way, "bench-gang-floor", _placement())
    assert writes is not None
    assert writes.gang == "job-001" and writes.generation == 3
    assert writes.ranks == {f"job-001-{r}": (f"hgx-h100-{r}", tuple(range(8))) for r in range(2)}
    assert SteerWrites.from_json(writes.to_json()) == writes


def test_pinned_writes_no_record() -> None:
    writes = steer_writes("pinned", "ns", _placement())
    assert writes is not None and writes.record is None and writes.status is None
    with pytest.raises(ValueError, match="no record"):
        writes.owned("u")


def test_minimal_writes_the_operator_s_record_owned_by_the_new_podgroup() -> None:
    writes = steer_writes("minimal", "bench-gang-floor", _placement())
    assert writes is not None and writes.status is not None
    body = writes.owned("u-new")
    assert body["metadata"] == {
        "name": "podgroup-job-001",
        "namespace": "bench-gang-floor",
        "ownerReferences": [OWNER | {"uid": "u-new"}],
    }
    assert body["spec"]["owner"]["uid"] == "u-new" and body["spec"]["gang"] == "job-001"
    assert writes.owned("u-other")["spec"]["owner"]["uid"] == "u-other"  # the prepared record is left as it was
    assert writes.status["phase"] == "Running" and len(writes.status["ranks"]) == 2
    assert "conditions" not in writes.status and "placedAt" not in writes.status


@pytest.mark.parametrize("placement", [_placement(phase="Planned"), _placement(ranks=0)])
def test_a_gang_the_operator_never_ran_gets_no_writes(placement: dict[str, Any]) -> None:
    assert steer_writes("minimal", "ns", placement) is None


def test_an_unknown_way_is_refused() -> None:
    with pytest.raises(ValueError, match="not a PodGroup floor way"):
        steer_writes("replay", "ns", _placement())


TRACE = [Job("job-000", 1, 4), Job("job-001", 2, 8)]


def _way(seconds: list[float], busbw: float = 100.0) -> dict[str, Any]:
    jobs = {
        job.name: {"running": True, "pods_running": job.workers, "seconds": s, "from_creation_s": 0.1}
        | {"busbw_gbps": busbw}
        for job, s in zip(TRACE, seconds, strict=True)
    }
    idle = {"gpu_seconds": 0.0, "peak_gpus": 0.0, "gpus_at_end": 0.0}
    return {"jobs": jobs, "idle_in_partial_gangs": idle, "partial_gangs_at_end": 0}


def test_the_report_says_whether_the_floor_is_within_the_time_goal() -> None:
    summary = summarise(
        {
            KUBE: _way([1.0, 2.0]),
            PODGROUP: _way([2.0, 4.0], busbw=150.0),
            MINIMAL: _way([1.5, 3.0]),  # 1.5x kube-scheduler: beyond
            PINNED: _way([1.2, 2.4]),  # 1.2x: within
        },
        TRACE,
    )
    assert summary["floor_within_time_goal"] == {MINIMAL: False, PINNED: True}
    assert summary["goal"]["time_met"] is False and summary["goal"]["busbw_met"] is True
    assert summary[f"{PODGROUP} / {PINNED}"]["makespan"] == pytest.approx(4.0 / 2.4)
    assert summary[f"{MINIMAL} / {KUBE}"]["time_p50"] == pytest.approx(1.5)
