"""A job's memory between passes: when it is busy, what lapses, which reports wait and how long retries back off."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from control_builders import T0, at, job, pod

from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus, WorkerPlacement
from gputopo.control.actions import JobActions
from gputopo.control.facts import PodFacts
from gputopo.control.memory import REPORT_DELAY_SECONDS, SHOWN_WITHIN_SECONDS, Memory, Written

placement = PlacementStatus(generation=2, workers=[WorkerPlacement(rank=0, node="n1", gpus=[0])])
PLACED = job("llm", gpus=1, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))


def created(tick: float = 0.0) -> Memory:
    """The memory of a job whose writes created the pods of placement generation 2 at ``tick``."""
    memory = Memory()
    assert memory.written(PLACED.key, PLACED.generation, Written(shown=2), tick) is None
    return memory


BUSY = [
    # (case, pods the watch shows, tick, writing, busy)
    ("writes-in-flight", [], 0.0, True, True),
    ("pods-not-shown-yet", [], 1.0, False, True),
    ("pods-shown", [pod(PLACED, 0, generation=2)], 1.0, False, False),
    ("an-older-generation-shown", [pod(PLACED, 0, generation=1)], 1.0, False, True),
    ("waited-long-enough", [], SHOWN_WITHIN_SECONDS, False, False),
]


@pytest.mark.parametrize(("case", "pods", "tick", "writing", "busy"), BUSY, ids=[c[0] for c in BUSY])
def test_a_job_is_busy_while_its_writes_go_out_and_until_its_pods_are_shown(
    case: str, pods: list[PodFacts], tick: float, writing: bool, busy: bool
) -> None:
    memory = created()
    jobs = {PLACED.key: PLACED}
    found = memory.before_pass(jobs, {PLACED.key: pods}, jobs.keys(), {PLACED.key} if writing else set(), T0, tick)
    assert (PLACED.key in found) is busy


def test_what_lapses_is_forgotten() -> None:
    memory = Memory()
    memory.avoid({PLACED.key: frozenset({"n1"})}, at(0), timedelta(seconds=60))
    memory.written(PLACED.key, PLACED.generation, Written(refusal="422 Invalid"), 0.0)
    jobs = {PLACED.key: PLACED}
    memory.before_pass(jobs, {}, jobs.keys(), set(), at(30), 30.0)
    assert memory.avoided() == {PLACED.key: frozenset({"n1"})} and memory.refusals() == {PLACED.key: "422 Invalid"}
    edited = {PLACED.key: replace(PLACED, generation=2)}
    memory.before_pass(edited, {}, edited.keys(), set(), at(61), 61.0)
    assert memory.avoided() == {} and memory.refusals() == {}, "past its time; the spec changed"


def test_a_report_waits_for_the_gangs_writes_at_most_the_report_delay() -> None:
    memory = Memory()
    report = JobActions(PLACED.key, PLACED.uid, status=TrainingJobStatus())
    assert memory.hold_reports([report], True, set(), 0.0) == ([], REPORT_DELAY_SECONDS)
    assert memory.hold_reports([report], True, set(), 1.0) == ([], REPORT_DELAY_SECONDS - 1.0)
    assert memory.hold_reports([report], True, set(), REPORT_DELAY_SECONDS) == ([report], None)
    assert memory.hold_reports([report], False, set(), 0.0) == ([report], None), "no gang going out: at once"


def test_failed_writes_back_off_and_a_success_resets_the_count() -> None:
    memory = Memory()
    delays = [memory.written(PLACED.key, 1, Written(error="Conflict"), 0.0) for _ in range(3)]
    assert delays == [0.5, 1.0, 2.0]
    assert memory.written(PLACED.key, 1, Written(), 0.0) is None
    assert memory.written(PLACED.key, 1, Written(error="Conflict"), 0.0) == 0.5


@pytest.mark.parametrize(("outcome", "placed", "frees"), [
    (Written(refusal="422 Invalid"), False, True),
    (Written(error="Conflict", status_failed=True), True, True),
    (Written(error="Conflict", status_failed=True), False, False),
    (Written(error="Conflict"), True, False),
], ids=["refused", "placed-status-failed", "status-failed-not-placed", "later-write-failed"])  # fmt: skip
def test_which_outcomes_give_the_plan_back(outcome: Written, placed: bool, frees: bool) -> None:
    assert Memory.frees_plan(outcome, placed) is frees


def test_a_job_entering_a_kueue_queue_has_its_workload_made_at_once_and_its_report_held() -> None:
    memory = Memory()
    workload = {"metadata": {"name": "trainingjob-1"}}
    entering = JobActions(PLACED.key, PLACED.uid, status=TrainingJobStatus(), workload=workload)
    entering.event("Normal", "WaitingForKueue", "waiting for Kueue to admit Workload trainingjob-1")
    started, due = memory.hold_reports([entering], True, set(), 0.0)
    assert started == [JobActions(PLACED.key, PLACED.uid, workload=workload)] and due == REPORT_DELAY_SECONDS
    assert Memory().hold_reports([entering], False, set(), 1.0) == ([entering], None), "no gang going out: at once"
    # Anything more than a report beside the Workload (here a stale Workload to delete) goes out whole.
    more = JobActions(PLACED.key, PLACED.uid, status=TrainingJobStatus(), workload=workload)
    more.workload_deletions.append("trainingjob-0")
    assert more.new_workload_only() is None
    assert Memory().hold_reports([more], True, set(), 2.0) == ([more], None)


def test_a_workload_create_that_went_out_is_not_repeated_while_the_watch_lags() -> None:
    memory = Memory()
    workload = {"metadata": {"name": "trainingjob-1"}}
    alone = JobActions(PLACED.key, PLACED.uid, workload=workload)
    assert memory.hold_reports([alone], False, set(), 0.0) == ([alone], None)
    # The watch does not show it yet, so the next step asks for it again: only its report goes.
    report = JobActions(PLACED.key, PLACED.uid, status=TrainingJobStatus(), workload=workload)
    assert memory.hold_reports([alone, report], False, set(), 1.0) == ([replace(report, workload=None)], None)
    # A new generation's Workload has another name: made at once.
    other = JobActions(PLACED.key, PLACED.uid, workload={"metadata": {"name": "trainingjob-2"}})
    assert memory.hold_reports([other], False, set(), 2.0)[0] == [other]
    # A watch that never shows it is believed no longer than SHOWN_WITHIN_SECONDS.
    memory = Memory()
    memory.hold_reports([alone], False, set(), 0.0)
    memory.before_pass({PLACED.key: PLACED}, {}, {PLACED.key}, set(), T0, SHOWN_WITHIN_SECONDS - 1)
    assert memory.hold_reports([alone], False, set(), SHOWN_WITHIN_SECONDS - 1)[0] == []
    memory.before_pass({PLACED.key: PLACED}, {}, {PLACED.key}, set(), T0, SHOWN_WITHIN_SECONDS + 1)
    assert memory[PLACED.key].workload_sent is None
    assert memory.hold_reports([alone], False, set(), SHOWN_WITHIN_SECONDS + 1)[0] == [alone]
    # A write that failed is retried whole.
    memory = Memory()
    memory.hold_reports([alone], False, set(), 0.0)
    assert memory.written(PLACED.key, PLACED.generation, Written(error="timeout"), 0.5) is not None
    assert memory.hold_reports([alone], False, set(), 1.0)[0] == [alone]
