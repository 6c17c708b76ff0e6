"""Steered pods kube-scheduler does not bind, on plain data: whatever reason it gives reaches the gang's status, and
a plan it does not bind within the timeout lets its GPUs go; TrainingJobs follow the same rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from control_builders import at, cluster, job, pod
from pass_builders import actions_of, placed, run
from test_gang_pass import GANG, KEY, actions, gang, member, recorded, two_nodes
from test_gang_pass import run as run_gangs

from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.gangs.model import Member
from gputopo.gangs.unbound import UNSCHEDULABLE, Refusal, give_up_at, group_refusal, refusal

PRIORITY = "all pods in a single pod group should have the same priority as the pod group's priority, got 100 and 0"
SCHEDULER_ERROR = Refusal("SchedulerError", PRIORITY, at(20))


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:20Z",
    }


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (_condition("PodScheduled", "False", "Unschedulable", "0/2 nodes"), ("Unschedulable", "0/2 nodes")),
        (_condition("PodScheduled", "False", "SchedulerError", PRIORITY), ("SchedulerError", PRIORITY)),
        (_condition("PodScheduled", "False", "SomethingNew"), ("SomethingNew", "")),
        (_condition("PodScheduled", "False", ""), ("NotScheduled", "")),
        (_condition("PodScheduled", "False", "SchedulingGated"), None),
        (_condition("PodScheduled", "True", ""), None),
        (_condition("Ready", "False", "ContainersNotReady"), None),
    ],
    ids=["unschedulable", "scheduler-error", "a-new-reason", "no-reason", "gated", "bound", "another-condition"],
)
def test_any_podscheduled_false_reason_but_gated_is_a_refusal(
    condition: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    found = refusal({"status": {"conditions": [condition]}})
    assert (found.reason, found.message) == expected if found is not None else expected is None
    if found is not None:
        assert found.since == datetime.fromisoformat("2025-01-01T00:00:20+00:00")


@pytest.mark.parametrize(
    ("kind", "status", "expected"),
    [
        ("PodGroupInitiallyScheduled", "False", "SchedulerError"),
        ("PodGroupScheduled", "False", "SchedulerError"),
        ("PodGroupInitiallyScheduled", "True", None),
    ],
    ids=["1.37-name", "earlier-name", "scheduled"],
)
def test_a_podgroup_condition_that_is_false_is_its_refusal(kind: str, status: str, expected: str | None) -> None:
    found = group_refusal({"status": {"conditions": [_condition(kind, status, "SchedulerError", PRIORITY)]}})
    assert (found.reason if found is not None else None) == expected


@pytest.mark.parametrize(
    ("since", "steered", "expected"),
    [(at(20), at(10), at(80)), (at(0), at(30), at(90)), (None, at(30), at(90)), (None, None, None)],
    ids=["refused-after-steering", "false-since-made-gated", "no-time-on-the-condition", "no-time-at-all"],
)
def test_a_refused_pod_is_given_up_a_timeout_after_its_refusal_or_steering_whichever_is_later(
    since: datetime | None, steered: datetime | None, expected: datetime | None
) -> None:
    assert give_up_at(Refusal("SchedulerError", "", since), steered, 60) == expected


def _steered(rank: int, said: Refusal) -> Member:
    return member(rank, gates=(), refusal=said)


def test_kube_schedulers_words_reach_the_status_while_it_does_not_bind() -> None:
    record = recorded(run_gangs([gang(member(0), member(1))], two_nodes()))
    refused = gang(*(_steered(r, SCHEDULER_ERROR) for r in (0, 1)))
    waiting = run_gangs([refused], two_nodes(), {KEY: record}, now=40)
    after = recorded(waiting)
    assert after.phase == "Planned" and len(after.ranks) == 2
    assert after.message.startswith("waiting for kube-scheduler, which has not bound ranks 0, 1: SchedulerError: ")
    assert PRIORITY in after.message
    assert waiting.wake_at == at(80)  # the timeout (60 s) after the refusal, which came after the plan (at 10)


def test_a_plan_kube_scheduler_refuses_past_the_timeout_lets_its_gpus_go_and_stays_let_go() -> None:
    record = recorded(run_gangs([gang(member(0), member(1))], two_nodes()))
    refused = gang(*(_steered(r, SCHEDULER_ERROR) for r in (0, 1)))
    result = run_gangs([refused], two_nodes(), {KEY: record}, now=81)
    a = actions(result)
    after = recorded(result)
    assert after.phase == "Released" and after.ranks == ()
    assert "did not bind ranks 0, 1 within 60s" in after.message and "SchedulerError" in after.message
    assert not a.evictions  # made again, they would be refused the same way
    assert [e.reason for _, e in a.events] == ["GangNotBound"]
    assert not result.gang_plans  # no GPUs held for it
    again = run_gangs([refused], two_nodes(), {KEY: after}, now=200)
    assert not again.gang_plans and not again.gang_actions  # the same pods: it waits, Released


def test_the_podgroups_own_condition_reaches_the_status_too() -> None:
    record = recorded(run_gangs([gang(member(0), member(1))], two_nodes()))
    said = Refusal("SchedulerError", PRIORITY, at(20))
    group = Refusal("Unschedulable", "minCount (2) cannot be satisfied: 0 scheduled, 2 remaining", at(20))
    refused = gang(*(_steered(r, said) for r in (0, 1)), group_refusal=group)
    after = recorded(run_gangs([refused], two_nodes(), {KEY: record}, now=40))
    assert f"PodGroup {GANG.name}: Unschedulable: minCount (2)" in after.message
    same = recorded(run_gangs([replace(refused, group_refusal=said)], two_nodes(), {KEY: record}, now=40))
    assert "PodGroup" not in same.message  # the same words once


def test_an_unschedulable_rank_is_still_planned_again_off_its_node() -> None:
    record = recorded(run_gangs([gang(member(0), member(1))], two_nodes()))
    node0 = record.plan[0].node
    stuck = _steered(0, Refusal(UNSCHEDULABLE, "0/2 nodes are available", at(20)))
    bound = member(1, gates=(), node=record.plan[1].node, phase="Running")
    result = run_gangs([gang(stuck, bound)], two_nodes(), {KEY: record}, now=81)
    after = recorded(result)
    assert [e.name for e in actions(result).evictions] == ["train-0-x0"]
    assert after.phase == "Planned" and [p.rank for p in after.ranks] == [1]
    assert "0/2 nodes are available" in after.message and result.avoid[KEY] == frozenset({node0})


@pytest.mark.parametrize(
    "said",
    [Refusal(UNSCHEDULABLE, "0/2 nodes are available", at(0)), Refusal("SchedulerError", PRIORITY, at(0))],
    ids=["unschedulable", "scheduler-error"],
)
def test_a_trainingjob_pod_kube_scheduler_does_not_bind_sends_the_job_back_to_planning(said: Refusal) -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))
    stuck = [pod(j, 0, gpus=(0, 1), refusal=said)]
    waiting = run([j], cluster().node("n1").node("n2").view(), stuck, now=30)
    assert not actions_of(waiting, "llm").deletions
    result = run([j], cluster().node("n1").node("n2").view(), stuck, now=61)
    a = actions_of(result, "llm")
    assert [d.name for d in a.deletions] == ["llm-0"]
    assert any(e.reason == "PlacementTimedOut" for e in a.events)
