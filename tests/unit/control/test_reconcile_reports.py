"""Control passes on plain data: the pods' real GPUs against the plan (the GpusAsPlanned condition, and
which probe reports are believed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from control_builders import T0, at, cluster, job
from pass_builders import CONFIG, DRA, actions_of, gang, placed, run, running

from gputopo.api.conditions import Condition
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus
from gputopo.control.lifecycle import Config


def _gpus_as_planned(status: TrainingJobStatus | None) -> tuple[str, str, str] | None:
    found = next((c for c in status.conditions if c.type == "GpusAsPlanned"), None) if status else None
    return (found.status, found.reason, found.message) if found else None


@pytest.mark.parametrize(
    ("config", "reason"),
    [(CONFIG, "DevicePluginChoseOtherGpus"), (DRA, "AllocatedOtherGpus")],
    ids=["device-plugin", "dra"],
)
def test_reality_wins_when_the_pod_holds_other_gpus(config: Config, reason: str) -> None:
    placement = placed([("n1", [0, 1]), ("n1", [2, 3])])
    j = job("llm", workers=2, gpus=2, status=running(placement))
    view = cluster().node("n1").holds("n1", "default", "llm-0", [4, 5]).holds("n1", "default", "llm-1", [2, 3]).view()
    actions = actions_of(run([j], view, gang(j, placement), config=config), "llm")
    assert actions.status is not None and actions.status.placement is not None
    assert [w.gpus for w in actions.status.placement.workers] == [[4, 5], [2, 3]]
    assert any(e.reason == "GpusDiffer" for e in actions.events)
    assert _gpus_as_planned(actions.status) == (
        "False",
        reason,
        f"generation 1: the {'device plugin' if config is CONFIG else 'allocation'} gave rank 0 on n1 holds GPUs "
        "[4, 5], planned [0, 1]",
    )


def test_gpus_as_planned_stays_false_for_the_generation_whose_gpus_differed() -> None:
    """The status follows the pods, so the next pass sees no difference: the condition still tells."""
    placement = placed([("n1", [4, 5])])
    differed = running(placement)
    differed.conditions = [
        Condition(type="GpusAsPlanned", status="False", reason="DevicePluginChoseOtherGpus", message="rank 0")
    ]
    j = job("llm", gpus=2, status=differed)
    view = cluster().node("n1").holds("n1", "default", "llm-0", [4, 5]).view()
    assert run([j], view, gang(j, placement)).actions == []


def test_gpus_as_planned_turns_true_once_every_rank_is_reported_on_its_plan() -> None:
    placement = placed([("n1", [0, 1]), ("n1", [2, 3])])
    j = job("llm", workers=2, gpus=2, status=running(placement))
    one = cluster().node("n1").holds("n1", "default", "llm-0", [0, 1])
    assert run([j], one.view(), gang(j, placement)).actions == []  # rank 1 not reported yet
    both = one.holds("n1", "default", "llm-1", [2, 3]).view()
    actions = actions_of(run([j], both, gang(j, placement)), "llm")
    assert _gpus_as_planned(actions.status) == ("True", "Reported", "the probes report the planned GPUs of all 2 ranks")
    assert not any(e.reason == "GpusDiffer" for e in actions.events)


def test_a_new_placement_awaits_the_report_of_its_gpus() -> None:
    status = running(placed([("n1", [4, 5])]))
    status.conditions = [Condition(type="GpusAsPlanned", status="False", reason="DevicePluginChoseOtherGpus")]
    status.placement = PlacementStatus(generation=1)
    status.phase = JobPhase.PENDING
    j = job("llm", gpus=2, status=status)
    actions = actions_of(run([j], cluster().node("n1").view()), "llm")
    assert actions.status is not None and actions.status.placement is not None
    assert actions.status.placement.generation == 2
    assert _gpus_as_planned(actions.status) == (
        "Unknown",
        "AwaitingReport",
        "generation 2 is not yet reported by the probes",
    )


def test_a_report_older_than_the_pod_is_about_the_previous_pod_of_that_name() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=running(placement))
    builder = cluster().node("n1").holds("n1", "default", "llm-0", [4, 5])
    builder.observed_at = T0
    assert run([j], builder.view(), gang(j, placement)).actions == []


def test_a_report_from_the_second_the_pod_was_bound_is_not_believed() -> None:
    """Condition times are whole seconds: a pod bound at T0.9 reads as bound at T0, so a report of the
    previous pod of that name from T0.5 must not pass for news about this one."""
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=running(placement))
    builder = cluster().node("n1").holds("n1", "default", "llm-0", [4, 5])
    builder.observed_at = T0 + timedelta(milliseconds=500)
    assert run([j], builder.view(), gang(j, placement)).actions == []


def test_a_report_from_the_second_of_the_binding_is_believed_once_the_probe_publishes_again() -> None:
    """The list first came in the binding's second; the probe published it again a second later, when the
    previous pod of that name was long gone: it is this pod's."""
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=running(placement))
    builder = cluster().node("n1").holds("n1", "default", "llm-0", [4, 5])
    builder.observed_at = T0 + timedelta(milliseconds=500)
    result = run([j], builder.view(), gang(j, placement))
    assert result.actions == [] and result.wake_at == at(15)  # looks again shortly
    builder.seen_at = T0 + timedelta(seconds=1)
    actions = actions_of(run([j], builder.view(), gang(j, placement)), "llm")
    assert actions.status is not None and actions.status.placement is not None
    assert actions.status.placement.workers[0].gpus == [4, 5]
