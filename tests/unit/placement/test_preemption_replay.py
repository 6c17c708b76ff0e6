"""Replaying a trace with priorities: a high-priority job waits its victims' grace period, not their runtime;
nominated GPUs are not backfilled; victims resume from their checkpoint."""

from __future__ import annotations

import pytest
from placement_builders import node, snapshot

from gputopo.sim.generate import TraceJob
from gputopo.sim.preemption.replay import PREEMPTION_POLICIES, replay
from gputopo.sim.preemption.trace import PriorityJob


def _job(name: str, arrival: float, duration: float, gpus: int, priority: int, **more: object) -> PriorityJob:
    cls = {0: "low", 10: "high"}[priority]
    return PriorityJob(TraceJob(name, arrival, duration, 1, gpus), priority, cls, **more)  # type: ignore[arg-type]


TRACE = [
    _job("low-a", 0, 10_000, 8, 0, checkpoint_interval_s=600.0),
    _job("low-b", 0, 10_000, 8, 0, checkpoint_interval_s=600.0),
    _job("high", 1_000, 100, 8, 10, grace_period_s=30.0),
    _job("backfill", 1_010, 100, 8, 0),  # arrives while high's victim terminates: must not take its GPUs
]


@pytest.mark.parametrize("policy", ["gputopo", "priority-only"])
def test_high_priority_waits_only_the_grace_period(policy: str) -> None:
    report = replay(snapshot(node("n0"), node("n1")), TRACE, PREEMPTION_POLICIES[policy])
    waits = {o.job: o.wait for o in report.outcomes}
    assert waits["high"] == 30.0
    assert report.preemptions == 1
    # 8 GPUs for the 400 s since the checkpoint at 600 s.
    assert report.victim_gpu_seconds_lost == 8 * 400
    assert waits["backfill"] > 30.0  # the nominated node was held for "high"
    summary = report.summary("high")
    assert summary["high_wait_p99_s"] == 30.0 and summary["jobs_never_placed"] == 0


@pytest.mark.parametrize("policy", ["gputopo", "priority-only"])
def test_waiting_behind_its_own_class_is_told_apart(policy: str) -> None:
    """high-b arrives while high-a holds one node and low the other: it waits low's grace period, behind lower
    priority. high-c arrives at 400 s when both nodes hold high jobs: no preemption may help it, and its wait
    until high-a ends at 1,000 s is all behind its own class."""
    trace = [
        _job("high-a", 0, 1_000, 8, 10),
        _job("low", 0, 10_000, 8, 0),
        _job("high-b", 100, 10_000, 8, 10, grace_period_s=30.0),
        _job("high-c", 400, 100, 8, 10),
    ]
    report = replay(snapshot(node("n0"), node("n1")), trace, PREEMPTION_POLICIES[policy])
    got = {o.job: (o.wait, o.behind_own_class, o.wait_behind_lower) for o in report.outcomes}
    assert got["high-b"] == (30.0, 0.0, 30.0)
    assert got["high-c"] == (600.0, 600.0, 0.0)
    summary = report.summary("high")
    assert summary["high_wait_p99_s"] == 600.0 and summary["high_wait_behind_lower_p99_s"] == 30.0


def test_without_preemption_high_priority_waits_for_a_departure() -> None:
    report = replay(snapshot(node("n0"), node("n1")), TRACE, PREEMPTION_POLICIES["none"])
    waits = {o.job: o.wait for o in report.outcomes}
    assert waits["high"] == 9_000.0 and report.preemptions == 0


def test_victim_resumes_from_its_checkpoint() -> None:
    report = replay(snapshot(node("n0"), node("n1")), TRACE, PREEMPTION_POLICIES["gputopo"])
    victim = next(o for o in report.outcomes if o.preempted)
    assert victim.job in ("low-a", "low-b") and victim.preempted == 1


def test_shadow_policy_costed_on_the_same_cluster() -> None:
    """low-a never checkpoints (a preemption at 1,000 s loses 8,000 GPU-s), low-b checkpoints every 600 s
    (loses 3,200). gputopo ends low-b; priority-only, asked on the same cluster without acting, would end low-a
    (both started together; the first running goes first), so the same-state ratio is 0.4."""
    trace = [
        _job("low-a", 0, 10_000, 8, 0),
        _job("low-b", 0, 10_000, 8, 0, checkpoint_interval_s=600.0),
        _job("high", 1_000, 100, 8, 10),
    ]
    policies = PREEMPTION_POLICIES
    report = replay(snapshot(node("n0"), node("n1")), trace, policies["gputopo"], shadow=policies["priority-only"])
    victim = next(o for o in report.outcomes if o.preempted)
    assert victim.job == "low-b" and report.victim_gpu_seconds_lost == 3_200
    summary = report.summary("high")
    assert summary["same_state_decisions"] == 1 and summary["same_state_shadow_refused"] == 0
    assert summary["same_state_shadow_victim_gpu_hours_lost"] == 8_000 / 3600
    assert summary["same_state_lost_ratio"] == 0.4
    assert summary["victim_gpu_hours_lost_by_preemptor_class"] == {"high": 3_200 / 3600}
