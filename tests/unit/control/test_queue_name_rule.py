"""Kueue's manageJobsWithoutQueueName for TrainingJobs, on plain data: with it, a job of a managed namespace that
names no LocalQueue is not placed (it cannot skip Kueue's quota by leaving the label off); elsewhere, and without
it, such a job is placed as before; a job already placed runs on."""

from __future__ import annotations

from dataclasses import replace

import pytest
from control_builders import cluster, job
from pass_builders import CONFIG, actions_of, placed, run, running

from gputopo.api.conditions import PLACED
from gputopo.control.kueue_quota import QueueNameRule

RULES = [
    # (case, rule, namespace, refused)
    ("off", QueueNameRule(), "team-a", False),
    ("on-everywhere", QueueNameRule(True), "team-a", True),
    ("on-in-its-namespace", QueueNameRule(True, frozenset({"team-a"})), "team-a", True),
    ("on-only-elsewhere", QueueNameRule(True, frozenset({"team-b"})), "team-a", False),
]


@pytest.mark.parametrize(("case", "rule", "namespace", "refused"), RULES, ids=[c[0] for c in RULES])
def test_which_namespaces_need_a_queue_name(case: str, rule: QueueNameRule, namespace: str, refused: bool) -> None:
    why = rule.refusal(namespace)
    assert (why is not None) is refused
    assert why is None or "kueue.x-k8s.io/queue-name" in why


@pytest.mark.parametrize(
    ("rule", "placed_now"),
    [(QueueNameRule(True), False), (QueueNameRule(True, frozenset({"elsewhere"})), True), (QueueNameRule(), True)],
    ids=["managed-namespace-waits", "unmanaged-namespace-is-placed", "rule-off-is-placed"],
)
def test_a_job_without_a_queue_name_waits_where_the_rule_holds(rule: QueueNameRule, placed_now: bool) -> None:
    view = cluster().node("n1").view()
    actions = actions_of(run([job()], view, config=replace(CONFIG, queue_names=rule)), "llm")
    assert bool(actions.pods) is placed_now
    if not placed_now:
        assert actions.status is not None
        condition = next(c for c in actions.status.conditions if c.type == PLACED)
        assert condition.reason == "WaitingForQueueName" and "kueue.x-k8s.io/queue-name" in condition.message


def test_a_job_placed_before_the_rule_runs_on() -> None:
    status = running(placed([("n1", list(range(8)))]))
    view = cluster().node("n1").view()
    result = run([job(status=status)], view, config=replace(CONFIG, queue_names=QueueNameRule(True)))
    written = next((a.status for a in result.actions if a.job[1] == "llm" and a.status is not None), None)
    assert written is None or all(c.reason != "WaitingForQueueName" for c in written.conditions)
