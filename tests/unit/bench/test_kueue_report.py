"""bench_kueue's pure parts: the trace as a Kueue user writes it for TAS and for a queue, and the goals the
report judges (bench/kueue_trace.py, bench/kueue_report.py; no API server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from gang_trace import Job
from gputopo.gangs.sources.kueue import GROUP_NAME_LABEL, TOTAL_COUNT_ANNOTATION
from gputopo.sandbox.kueue_queues import (
    GPUTOPO_QUEUE,
    HOSTNAME_LABEL,
    PREFERRED_TOPOLOGY,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    TAS_QUEUE,
)
from gputopo.sandbox.profiles import TIER0_LABEL
from kueue_report import FLOOR, FLOOR_UNDER_KUEUE, GPUTOPO, KUBE, TAS, UNDER_KUEUE, goals, summarise
from kueue_trace import queued_training_jobs, tas_pod_groups

TRACE = [Job("job-000", 1, 4), Job("job-001", 2, 8), Job("job-002", 4, 8)]


def test_each_job_is_one_kueue_pod_group_in_the_tas_queue_with_a_topology_annotation() -> None:
    pods = tas_pod_groups(TRACE, "ns")["items"]
    assert [p["metadata"]["name"] for p in pods] == [p for j in TRACE for p in j.pods()]
    by_name = {p["metadata"]["name"]: p for p in pods}
    one, gang = by_name["job-000-0"], by_name["job-002-3"]
    assert one["metadata"]["labels"][QUEUE_LABEL] == TAS_QUEUE
    assert one["metadata"]["annotations"] == {TOTAL_COUNT_ANNOTATION: "1", REQUIRED_TOPOLOGY: HOSTNAME_LABEL}
    assert gang["metadata"]["labels"][GROUP_NAME_LABEL] == "job-002"
    assert gang["metadata"]["annotations"] == {TOTAL_COUNT_ANNOTATION: "4", PREFERRED_TOPOLOGY: TIER0_LABEL}


def test_queued_training_jobs_name_the_queue() -> None:
    items = queued_training_jobs(TRACE, "ns")["items"]
    assert {i["kind"] for i in items} == {"TrainingJob"}
    assert all(i["metadata"]["labels"][QUEUE_LABEL] == GPUTOPO_QUEUE for i in items)


def _side(seconds: list[float | None], busbw: list[float]) -> dict[str, Any]:
    jobs = {
        job.name: {"running": s is not None, "pods_running": job.workers if s is not None else 0}
        | ({"seconds": s, "busbw_gbps": b} if s is not None else {})
        for job, s, b in zip(TRACE, seconds, busbw, strict=True)
    }
    idle = {"gpu_seconds": 0.0, "peak_gpus": 0.0, "gpus_at_end": 0.0}
    return {"jobs": jobs, "idle_in_partial_gangs": idle, "partial_gangs_at_end": 0, "api_writes_total": 10}


def _met(summary: dict[str, Any]) -> dict[str, bool]:
    return {g["name"]: g["met"] for g in summary["goals"]}


def test_the_goals_are_judged_on_the_sides_figures() -> None:
    sides = {
        KUBE: _side([0.5, 0.6, 0.7], [10.0, 5.0, 2.0]),
        TAS: _side([2.0, 3.0, None], [10.0, 100.0, 0.0]),  # the 4x8 never ran under TAS
        GPUTOPO: _side([1.0, 1.5, 2.0], [10.0, 140.0, 50.0]),
        UNDER_KUEUE: _side([1.2, 1.8, 2.5], [10.0, 140.0, 50.0]),
        FLOOR: _side([0.9, 1.3, 1.9], [10.0, 140.0, 50.0]),
    }
    summary = summarise(sides, TRACE)
    # Bus bandwidth only on multi-node jobs Running on both: the 2x8 (140 against 100).
    assert summary["multi_node_both"] == {"jobs": 1, GPUTOPO: 140.0, TAS: 100.0}
    assert summary["sides"][GPUTOPO]["busbw_multi_node_mean_gbps"] == 95.0
    assert summary["by_size"]["4x8"][TAS] == {"running": 0, "s_p50": None, "busbw_mean_gbps": None}
    assert summary["by_size"]["2x8"][GPUTOPO] == {"running": 1, "s_p50": 1.5, "busbw_mean_gbps": 140.0}
    assert _met(summary) == {
        "sooner than Kueue TAS": True,  # p50 1.5 < 2.5 (TAS ran two jobs), whole 2.0 < 3.0
        "bus bandwidth against Kueue TAS": True,  # 1.4x
        "under Kueue quota": False,  # 2.5 / 2.0 = 1.25x
        "against the floor client": True,  # 1.5 / 1.3 = 1.15x
    }


def test_a_goal_whose_sides_did_not_run_is_not_met() -> None:
    summary = summarise({GPUTOPO: _side([1.0, 1.5, 2.0], [1.0, 1.0, 1.0])}, TRACE)
    assert not any(g.met for g in goals(summary))
    assert "multi_node_both" not in summary


def test_kueue_admission_is_summed_up_and_named_in_the_under_kueue_goal() -> None:
    under = _side([1.2, 1.8, 2.5], [10.0, 140.0, 50.0])
    for name, admitted in zip([j.name for j in TRACE], [0.4, 1.1, 2.2], strict=True):
        under["jobs"][name] |= {"workload_s": admitted - 0.3, "admitted_s": admitted}
    summary = summarise({GPUTOPO: _side([1.0, 1.5, 2.0], [1.0, 1.0, 1.0]), UNDER_KUEUE: under}, TRACE)
    assert summary["sides"][UNDER_KUEUE]["kueue_admitted_s"]["max"] == 2.2
    assert summary["sides"][UNDER_KUEUE]["kueue_workload_s"]["p50"] == 0.8
    assert summary["sides"][GPUTOPO]["kueue_admitted_s"] is None
    (goal,) = [g for g in summary["goals"] if g["name"] == "under Kueue quota"]
    assert goal["figure"] == "1.25x (2.5 against 2.0 s; Kueue admitted the last Workload at 2.2 s)"


def test_the_under_kueue_goal_names_what_the_quota_costs_the_floor_client() -> None:
    sides = {
        GPUTOPO: _side([1.0, 1.5, 2.0], [1.0, 1.0, 1.0]),
        UNDER_KUEUE: _side([1.2, 1.8, 2.5], [1.0, 1.0, 1.0]),
        FLOOR: _side([0.9, 1.3, 1.6], [1.0, 1.0, 1.0]),
        FLOOR_UNDER_KUEUE: _side([1.1, 1.7, 2.4], [1.0, 1.0, 1.0]),  # 2.4 / 1.6 = 1.5x
    }
    (goal,) = [g for g in summarise(sides, TRACE)["goals"] if g["name"] == "under Kueue quota"]
    assert goal["figure"].endswith("; the floor client under Kueue's quota takes 1.50x its time alone)")
    assert not goal["met"]


def test_the_floor_goal_is_judged_on_the_median_of_its_rounds() -> None:
    floor = _side([0.9, 1.3, 1.9], [10.0, 140.0, 50.0])
    floor["paired_rounds"] = [
        {"gputopo_p50": 2.0, "minimal_p50": 1.0, "gputopo_whole": 4.0, "minimal_whole": 4.0},  # 2.0x: a slow round
        {"gputopo_p50": 1.1, "minimal_p50": 1.0, "gputopo_whole": 4.0, "minimal_whole": 4.0},
        {"gputopo_p50": 1.2, "minimal_p50": 1.0, "gputopo_whole": 4.4, "minimal_whole": 4.0},
    ]
    summary = summarise({GPUTOPO: _side([1.0, 1.5, 2.0], [1.0, 1.0, 1.0]), FLOOR: floor}, TRACE)
    (goal,) = [g for g in summary["goals"] if g["name"] == "against the floor client"]
    assert goal["met"]
    assert goal["figure"].startswith("1.20x, the median of 3 rounds (2.00x, 1.10x, 1.20x: 2.0 against 1.0 s;")


def test_a_round_without_a_figure_leaves_the_floor_goal_unmet() -> None:
    floor = _side([0.9, 1.3, 1.9], [10.0, 140.0, 50.0])
    floor["paired_rounds"] = [
        {"gputopo_p50": 1.0, "minimal_p50": 1.0, "gputopo_whole": 4.0, "minimal_whole": 4.0},
        {"gputopo_p50": None, "minimal_p50": 1.0, "gputopo_whole": None, "minimal_whole": 4.0},
    ]
    summary = summarise({GPUTOPO: _side([1.0, 1.5, 2.0], [1.0, 1.0, 1.0]), FLOOR: floor}, TRACE)
    assert not _met(summary)["against the floor client"]
