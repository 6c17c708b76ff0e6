"""Control passes on plain data: what a fault under a running gang does to it (links, NICs, nodes, restarts)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from control_builders import T0, at, cluster, job
from pass_builders import CONFIG, DRA, actions_of, gang, placed, run, running

from gputopo.api.conditions import Condition
from gputopo.api.nodetopology import LinkState, NicState
from gputopo.api.trainingjob import JobPhase, PlacementStatus
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, PodFacts
from gputopo.control.lifecycle import Config
from gputopo.control.view import ClusterView


def _link_down_under_the_gang(config: Config) -> JobActions:
    placement = placed([("n1", [0, 1])])
    policy = {"gracePeriodSeconds": 15, "backoffSeconds": 0}
    j = job("llm", gpus=2, failurePolicy=policy, status=running(placement))
    view = cluster().node("n1").link("n1", 0, 1).view()
    result = run([j], view, gang(j, placement), config=config)
    actions = actions_of(result, "llm")
    assert actions.status is not None
    assert actions.status.restarts == 1 and actions.status.phase is JobPhase.RESCHEDULING
    assert [(d.name, d.grace_seconds) for d in actions.deletions] == [("llm-0", 15)]
    assert any(e.reason == "LinkDown" and e.type == "Warning" for e in actions.events)
    assert result.restarts == ["LinkDown"]
    return actions


def test_link_down_in_a_used_pair_re_places_on_healthy_gpus() -> None:
    """With DRA the plan binds: planned in the same pass, away from the broken pair; the pods wait until
    the old ones are gone."""
    actions = _link_down_under_the_gang(DRA)
    assert actions.status is not None
    new = actions.status.placement
    assert new is not None and new.generation == 2 and new.workers
    assert not {0, 1} <= set(new.workers[0].gpus) and actions.pods == []


def test_link_down_with_the_device_plugin_waits_since_it_would_give_the_broken_pair_again() -> None:
    """The device plugin sees no NVSwitch link and picks GPUs 0 and 1 (the first same-socket pair) once the
    old pod is gone: no node offers the gang a working pair, so it waits instead of being planned there."""
    actions = _link_down_under_the_gang(CONFIG)
    assert actions.status is not None
    assert actions.status.placement is not None and not actions.status.placement.workers
    placed_condition = next(c for c in actions.status.conditions if c.type == "Placed")
    assert placed_condition.status == "False" and placed_condition.reason == "WaitingForCapacity"


def test_link_down_in_gpus_the_job_does_not_use_changes_nothing() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=running(placement))
    result = run([j], cluster().node("n1").link("n1", 4, 5).view(), gang(j, placement))
    assert result.actions == []


def _rail_job(min_busbw: float) -> tuple[JobFacts, PlacementStatus]:
    nics = [f"mlx5_{i}" for i in range(8)]
    placement = placed([("n1", list(range(8))), ("n2", list(range(8)))], nics=nics)
    j = job(
        "rails",
        workers=2,
        gpus=8,
        topology={"minBusBandwidthGBps": min_busbw},
        failurePolicy={"onLinkFailure": "Tolerate"},
        status=running(placement),
    )
    return j, placement


def test_nic_down_with_tolerate_and_enough_bandwidth_shows_the_degraded_estimate() -> None:
    j, placement = _rail_job(min_busbw=100)
    view = cluster().node("n1").node("n2").nic("n1", "mlx5_3", NicState.DOWN).view()
    actions = actions_of(run([j], view, gang(j, placement)), "rails")
    assert actions.status is not None and actions.status.restarts == 0 and actions.deletions == []
    assert actions.status.phase is JobPhase.RUNNING
    degraded = next(c for c in actions.status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "NicDown"
    assert actions.status.placement is not None
    assert actions.status.placement.estimated_bus_bandwidth_g_bps < 400.0


def _recovering() -> tuple[JobFacts, list[PodFacts], ClusterView]:
    """A gang marked Degraded whose NIC works again: the step puts the estimate back (in place)."""
    j, placement = _rail_job(min_busbw=100)
    degraded = j.status.model_copy(deep=True)
    degraded.conditions = [Condition(type="Degraded", status="True", reason="NicDown", last_transition_time=T0)]
    degraded.placement = placement.model_copy(update={"estimated_bus_bandwidth_g_bps": 12.0})
    j = replace(j, status=degraded)
    return j, gang(j, placement), cluster().node("n1").node("n2").view()


def _tolerating() -> tuple[JobFacts, list[PodFacts], ClusterView]:
    j, placement = _rail_job(min_busbw=100)
    return j, gang(j, placement), cluster().node("n1").node("n2").nic("n1", "mlx5_3", NicState.DOWN).view()


def _new() -> tuple[JobFacts, list[PodFacts], ClusterView]:
    return job("llm", gpus=2), [], cluster().node("n1").view()


UNTOUCHED = [("recovered-estimate", _recovering), ("tolerated-estimate", _tolerating), ("placed", _new)]


@pytest.mark.parametrize(("case", "make"), UNTOUCHED, ids=[c[0] for c in UNTOUCHED])
def test_a_pass_never_changes_the_status_it_read(case: str, make: Any) -> None:
    """Each step works on its own copy of the status: the job's facts (what the index holds) stay as read,
    also where a step changes the placement's estimate in place."""
    j, pods, view = make()
    before = j.status.model_copy(deep=True)
    actions = actions_of(run([j], view, pods), j.name)
    assert actions.status is not None and actions.status != before
    assert j.status == before


def test_nic_down_with_tolerate_below_the_minimum_re_places() -> None:
    j, placement = _rail_job(min_busbw=10_000)
    view = cluster().node("n1").node("n2").nic("n1", "mlx5_3", NicState.DOWN).view()
    actions = actions_of(run([j], view, gang(j, placement)), "rails")
    assert actions.status is not None and actions.status.restarts == 1
    assert {d.name for d in actions.deletions} == {"rails-0", "rails-1"}


def test_a_second_fault_inside_the_cooldown_waits() -> None:
    placement = placed([("n1", [0, 1])], generation=2)
    status = running(placement, restarts=1, last_restart_time=at(5))
    j = job("llm", gpus=2, failurePolicy={"cooldownSeconds": 30}, status=status)
    view = cluster().node("n1").link("n1", 0, 1, LinkState.DEGRADED).view()
    result = run([j], view, gang(j, placement, "Running"))
    actions = actions_of(result, "llm")
    assert actions.status is not None and actions.status.restarts == 1 and actions.deletions == []
    assert result.wake_at == at(35)


def test_node_not_ready_is_a_fault_only_after_the_grace() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=running(placement))
    view = cluster().node("n1").node("n2").not_ready("n1", at(0)).view()
    early = run([j], view, gang(j, placement), now=20)
    assert early.actions == [] and early.wake_at == at(30)
    j = job("llm", gpus=2, failurePolicy={"backoffSeconds": 0}, status=running(placement))
    late = actions_of(run([j], view, gang(j, placement), now=31), "llm")
    assert late.status is not None and late.status.restarts == 1
    assert [(d.name, d.grace_seconds) for d in late.deletions] == [("llm-0", 0)]
    assert late.status.placement is not None and late.status.placement.workers[0].node == "n2"


def test_max_restarts_exhausted_fails_with_the_reason() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, failurePolicy={"maxRestarts": 1}, status=running(placement, restarts=1))
    actions = actions_of(run([j], cluster().node("n1").unhealthy("n1", 1).view(), gang(j, placement)), "llm")
    assert actions.status is not None and actions.status.phase is JobPhase.FAILED
    failed = next(c for c in actions.status.conditions if c.type == "Failed")
    assert failed.reason == "RestartsExhausted" and "GPU1" in failed.message
