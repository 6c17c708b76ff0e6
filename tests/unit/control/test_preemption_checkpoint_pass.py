"""A preemptor that waits for its victims' next checkpoint, in the control pass: its class's wait and the time it
was queued reach ``plan_preemption``; while it waits it nominates nothing, ends nobody, says why once (not once
per pass) and asks for a pass at the checkpoint; at the checkpoint it preempts, and the victim loses nothing.

The victims declare a checkpoint every 600 s from their start (T0): the next after 1000 s is at 1200 s."""

from __future__ import annotations

from dataclasses import replace

import pytest
from control_builders import at, pod
from pass_builders import CONFIG, actions_of, placed, running
from test_gang_pass import KEY, OWNER, member, recorded
from test_gang_pass import gang as foreign_gang
from test_preemption_pass import (
    CLASSES,
    HIGH,
    LOW,
    _gang_input,
    _low_on_two_nodes,
    _running_gang,
    read_back,
    step,
    tj,
    two_node_view,
)
from test_preemption_pass import view as base_view

from gputopo.api.conditions import INVALID, KUEUE_ADMITTED, PLACED, Condition
from gputopo.api.preemption import ANNOTATION_CHECKPOINT_INTERVAL, PreemptionStatus
from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control import preemptions
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, PodFacts
from gputopo.control.gangrecords import GangRecord
from gputopo.control.lifecycle import WAITING_FOR_CHECKPOINT, JobStep, wait_for_checkpoint
from gputopo.control.preemptpass import gang_queued_since, job_queued_since
from gputopo.control.priority import PriorityClassFacts
from gputopo.control.reconcile import PassResult
from gputopo.control.view import ClusterView
from gputopo.placement.preemption import Preemptor

PATIENT = "prod-patient"
WAITING = {**CLASSES, PATIENT: PriorityClassFacts(PATIENT, 1000, checkpoint_wait_s=300.0)}
INTERVAL = {"preemption": {"checkpointIntervalSeconds": 600}}


def view(*pods: PodFacts) -> ClusterView:
    return replace(base_view(*pods), priority_classes=WAITING)


def low_every_ten_minutes(**spec: object) -> tuple[JobFacts, list[PodFacts]]:
    status = running(placed([("n0", list(range(8)))]))
    status.conditions = []
    low = tj("low", "research", status, **INTERVAL, **spec)
    return low, [pod(low, 0, node="n0", gpus=tuple(range(8)), phase="Running")]


def placed_condition(result: PassResult, j: JobFacts) -> Condition:
    status = read_back(j, result).status
    return next(c for c in status.conditions if c.type == PLACED)


def test_the_pass_hands_the_class_wait_and_the_queued_time_to_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Preemptor] = []
    real = preemptions.plan_preemption

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(args[1])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(preemptions, "plan_preemption", spy)
    low, pods = low_every_ten_minutes()
    high = read_back(tj("high", PATIENT), step([low, tj("high", PATIENT)], pods, view(*pods)))
    assert seen[-1].checkpoint_wait_s == 300.0
    assert seen[-1].waiting_since == at(1000).timestamp()  # its first pass: Placed=False since then
    step([low, high], pods, view(*pods), now=1100.0)
    assert seen[-1].waiting_since == at(1000).timestamp()  # still counted from when it was queued
    step([low, tj("plain", "prod")], pods, view(*pods))
    assert seen[-1].checkpoint_wait_s == 0.0


def test_a_preemptor_waits_for_the_victims_checkpoint_quietly_then_preempts_at_it() -> None:
    low, pods = low_every_ten_minutes()
    first = step([low, tj("high", PATIENT)], pods, view(*pods))
    assert first.nominated == {} and not [a for a in first.actions if a.job == LOW]  # nobody touched
    mine = actions_of(first, "high")
    assert mine.status is not None and mine.status.nomination is None
    condition = placed_condition(first, tj("high", PATIENT))
    assert condition.status == "False" and condition.reason == "WaitingForCheckpoint"
    assert condition.message.startswith(f"waiting until {at(1200).isoformat()} for the next checkpoint of default/low")
    assert "its victims checkpoint in 200 s" in condition.message
    assert [e.reason for e in mine.events] == ["WaitingForCheckpoint"]  # not also Unplaceable
    assert first.wake_at == at(1200)  # a pass is asked for at the checkpoint
    assert first.waiting_for_checkpoint == 1  # for the metric

    # Passes while it waits: the same status, no write, no Event; the wake still at the checkpoint.
    high = read_back(tj("high", PATIENT), first)
    for now in (1001.0, 1150.0):
        again = step([low, high], pods, view(*pods), now=now)
        assert not [a for a in again.actions if a.job in (HIGH, LOW)], now
        assert again.wake_at == at(1200) and again.nominated == {}

    # At the checkpoint: it preempts; the victim, ended there, loses nothing.
    at_checkpoint = step([low, high], pods, view(*pods), now=1200.0)
    nominated = actions_of(at_checkpoint, "high")
    assert nominated.status is not None and nominated.status.nomination is not None
    assert nominated.status.nomination.victims == ["default/low"]
    assert "Preempting" in [e.reason for e in nominated.events]  # with the queue's word, as any preemptor's first
    high = read_back(high, at_checkpoint)
    ended = step([low, high], pods, view(*pods), now=1201.0)
    assert [e.victim for e in ended.preempted] == [LOW]
    assert ended.preempted[0].gpu_hours_lost == pytest.approx(8 * 1 / 3600)


def test_a_wait_counts_from_when_the_preemptor_was_queued() -> None:
    """Queued at 800 with a 300 s wait: the checkpoint at 1200 is past what is left of it, so it preempts now."""
    low, pods = low_every_ten_minutes()
    queued = TrainingJobStatus(conditions=[Condition(type=PLACED, status="False", last_transition_time=at(800))])
    result = step([low, tj("high", PATIENT, queued)], pods, view(*pods))
    assert HIGH in result.nominated


def test_a_class_without_a_wait_or_a_victim_without_an_interval_preempts_at_once() -> None:
    low, pods = low_every_ten_minutes()
    assert HIGH in step([low, tj("high", "prod")], pods, view(*pods)).nominated
    status = running(placed([("n0", list(range(8)))]))
    status.conditions = []
    plain = tj("low", "research", status)
    assert HIGH in step([plain, tj("high", PATIENT)], pods, view(*pods)).nominated


def test_a_preemptor_whose_victim_ends_meanwhile_is_placed_without_preempting() -> None:
    low, pods = low_every_ten_minutes()
    high = read_back(tj("high", PATIENT), step([low, tj("high", PATIENT)], pods, view(*pods)))
    result = step([high], [], view(), now=1100.0)
    assert placed_condition(result, high).status == "True" and result.preempted == []


def test_a_wait_for_another_checkpoint_is_said_again_and_the_same_one_is_not() -> None:
    """``wait_for_checkpoint`` on a job whose status already waits: the same head keeps the message it was first
    given, with no Event; another head (a later checkpoint, other victims) replaces it, with an Event. The queue's
    Unplaceable Event of the pass is dropped either way."""
    head = f"waiting until {at(1200).isoformat()} for the next checkpoint of default/low"
    first = f"{head} before preempting: its victims checkpoint in 200 s"
    waiting = Condition(type=PLACED, status="False", reason=WAITING_FOR_CHECKPOINT, message=first)
    j = tj("high", PATIENT, TrainingJobStatus(conditions=[waiting.model_copy(update={"last_transition_time": at(1)})]))
    v = view()
    for now, (said, message), events in (
        (1100.0, (head, f"{head} before preempting: its victims checkpoint in 100 s"), []),
        (1100.0, ("waiting until later", "waiting until later: for default/other"), [WAITING_FOR_CHECKPOINT]),
    ):
        out = JobStep(JobActions(j.key, j.uid), j.status.model_copy(deep=True))
        out.actions.event("Normal", "Unplaceable", "no 8 free GPUs")
        wait_for_checkpoint(j, out, said, message, at(now), v, CONFIG)
        kept = next(c for c in out.status.conditions if c.type == PLACED)
        assert kept.message == (first if said == head else message)
        assert [e.reason for e in out.actions.events] == events


# -- when it was queued ---------------------------------------------------------------------------------------


def _status(*conditions: tuple[str, str, float]) -> TrainingJobStatus:
    return TrainingJobStatus(
        conditions=[Condition(type=t, status=s, last_transition_time=at(when)) for t, s, when in conditions]  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("conditions", "since"),
    [
        ((), 5.0),  # no pass yet: its creation
        (((PLACED, "False", 50.0),), 50.0),  # unplaced since its first pass, or since it was preempted
        (((PLACED, "True", 50.0),), 5.0),  # a Placed=True time is no queueing
        (((PLACED, "False", 50.0), (KUEUE_ADMITTED, "True", 70.0)), 70.0),  # queued for GPUs once Kueue admitted it
        (((PLACED, "False", 50.0), (INVALID, "False", 90.0)), 90.0),  # queued once its spec was fixed
    ],
)
def test_a_jobs_queued_time_is_the_latest_its_status_shows(
    conditions: tuple[tuple[str, str, float], ...], since: float
) -> None:
    j = tj("high", PATIENT)
    j = replace(j, created=at(5.0))
    assert job_queued_since(j, _status(*conditions)) == at(since)


def test_a_foreign_gangs_queued_time_is_its_oldest_live_pod_its_last_plan_or_preemption() -> None:
    made = foreign_gang(member(0), member(1))  # made at 0
    assert gang_queued_since(made, None) == at(0)
    record = GangRecord(KEY, "job-train", planned_at=at(40))
    assert gang_queued_since(made, record) == at(40)
    preempted = replace(record, preemption=PreemptionStatus(count=1, last_preempted_at=at(90)))
    assert gang_queued_since(made, preempted) == at(90)
    remade = foreign_gang(replace(member(0), created=at(120)))  # evicted and made again by its owner
    assert gang_queued_since(remade, preempted) == at(120)
    assert gang_queued_since(foreign_gang(), None) is None


# -- foreign gangs ----------------------------------------------------------------------------------------------


def test_a_foreign_gang_of_a_patient_class_waits_pending_once_then_preempts() -> None:
    low, pods, v = _low_on_two_nodes()
    assert low.spec is not None
    terms = low.spec.preemption.model_copy(update={"checkpoint_interval_seconds": 600})
    low = replace(low, spec=low.spec.model_copy(update={"preemption": terms}))
    v = replace(v, priority_classes=WAITING)
    made = [replace(member(r), created=at(950)) for r in (0, 1)]  # queued at 950: its wait lasts until 1250
    pending = foreign_gang(*made, priority=1000, owner=OWNER)
    given = _gang_input(pending, None)
    for b in given.bodies.values():
        b["spec"]["priorityClassName"] = PATIENT
    first = step([low], pods, v, gangs=given)
    record = recorded(first)
    assert record.nomination is None and record.phase == "Pending"
    # The victim is of another namespace (default, the gang's is team): named by its UID, not its name.
    head = (
        f"waiting until {at(1200).isoformat()} for the next checkpoint of a gang of another namespace (UID {low.uid})"
    )
    assert record.message.startswith(head) and "default/low" not in record.message
    events = [e.reason for _, e in next(a for a in first.gang_actions if a.key == KEY).events]
    assert events == ["WaitingForCheckpoint"]
    assert first.wake_at == at(1200) and not [a for a in first.actions if a.job == LOW]

    again = step([low], pods, v, now=1100.0, gangs=replace(given, records={KEY: record}))
    quiet = next((a for a in again.gang_actions if a.key == KEY), None)
    assert quiet is None or (quiet.status is None and not quiet.events)
    assert again.wake_at == at(1200)

    then = step([low], pods, v, now=1200.0, gangs=replace(given, records={KEY: record}))
    after = recorded(then)
    assert after.nomination is not None and after.nomination.victims == ["uid:uid-low"]
    # Made at 0 instead, its wait (300 s) is over by 1000: it preempts at once.
    old = foreign_gang(member(0), member(1), priority=1000, owner=OWNER)
    given = _gang_input(old, None)
    for b in given.bodies.values():
        b["spec"]["priorityClassName"] = PATIENT
    assert recorded(step([low], pods, v, gangs=given)).nomination is not None


def test_a_training_job_waits_for_a_foreign_gangs_declared_checkpoint() -> None:
    """The gang was planned at 10 and checkpoints every 600 s by its pods' annotation: its next is at 1210, when
    it is evicted having lost nothing."""
    g, record = _running_gang(priority=10)
    big = tj("high", PATIENT, workers=2)
    v = replace(two_node_view(), priority_classes=WAITING)
    given = _gang_input(g, record, **{ANNOTATION_CHECKPOINT_INTERVAL: "600"})
    result = step([big], [], v, gangs=given)
    assert result.nominated == {} and result.wake_at == at(1210)
    assert placed_condition(result, big).reason == "WaitingForCheckpoint"
    high = read_back(big, step([big], [], v, now=1210.0, gangs=given))
    assert high.status.nomination is not None and high.status.nomination.victims == ["uid:rec-uid"]
    ended = step([high], [], v, now=1211.0, gangs=given)
    assert [e.victim for e in ended.preempted] == [KEY]
    assert ended.preempted[0].gpu_hours_lost == pytest.approx(16 * 1 / 3600)
    garbage = _gang_input(g, record, **{ANNOTATION_CHECKPOINT_INTERVAL: "hourly"})
    assert HIGH in step([big], [], v, gangs=garbage).nominated  # no interval known: it preempts at once
