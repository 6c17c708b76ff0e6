"""Control passes on plain data: a job's way from Pending to Running and what a fault does to it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from control_builders import T0, at, cluster, foreign_pod, job, pod

from gputopo.api.conditions import Condition
from gputopo.api.group import ANNOTATION_GPUS
from gputopo.api.nodetopology import LinkState, NicState
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus, WorkerPlacement
from gputopo.control.actions import JobActions
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView, used_gpus
from gputopo.placement import DEFAULT_TIERS, place

CONFIG = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30)
DRA = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30, gpu_allocation=GpuAllocation.DRA)


def run(
    jobs: Sequence[JobFacts],
    view: ClusterView,
    pods: Sequence[PodFacts] = (),
    now: float = 10.0,
    ledger: Sequence[PlannedGang] = (),
    config: Config = CONFIG,
) -> PassResult:
    by_job: dict[JobKey, list[PodFacts]] = {}
    for p in pods:
        by_job.setdefault((p.namespace, str(p.job)), []).append(p)
    return run_pass(PassInput({j.key: j for j in jobs}, by_job, view, at(now), ledger), PassRules(config, place))


def actions_of(result: PassResult, name: str) -> JobActions:
    return next(a for a in result.actions if a.job[1] == name)


def placed(workers: list[tuple[str, list[int]]], generation: int = 1, nics: list[str] | None = None) -> PlacementStatus:
    return PlacementStatus(
        generation=generation,
        estimatedBusBandwidthGBps=400.0,
        bottleneck="test",
        workers=[WorkerPlacement(rank=i, node=n, gpus=g, nics=nics or []) for i, (n, g) in enumerate(workers)],
    )


def running(placement: PlacementStatus, **extra: object) -> TrainingJobStatus:
    return TrainingJobStatus(phase=JobPhase.RUNNING, placement=placement, start_time=T0, observed_generation=1, **extra)


def gang(j: JobFacts, placement: PlacementStatus, phase: str = "Running") -> list[PodFacts]:
    return [
        pod(j, w.rank, node=w.node, gpus=tuple(w.gpus), generation=placement.generation, phase=phase)
        for w in placement.workers
    ]


def test_a_new_one_worker_job_is_placed_and_its_pod_created_ungated() -> None:
    j = job("llm", workers=1, gpus=2, topology={"intraNode": "nvlink"})
    view = cluster().node("n1", "h100-nvl-pairs").view()
    result = run([j], view)
    actions = actions_of(result, "llm")
    assert actions.status is not None and actions.status.phase is JobPhase.PLACING
    assert actions.status.placement is not None
    worker = actions.status.placement.workers[0]
    assert worker.node == "n1" and len(worker.gpus) == 2
    assert view.topologies["n1"].topology is not None
    assert view.topologies["n1"].topology.link(*worker.gpus).kind.value == "NVLink"
    assert [p["metadata"]["name"] for p in actions.pods] == ["llm-0"]
    assert [r.job for r in result.reservations] == [("default", "llm")]
    assert any(e.reason == "Placed" for e in actions.events)
    # One worker is the whole gang: no gate to lift, no Service; rank 0 is the pod itself.
    assert "schedulingGates" not in actions.pods[0]["spec"] and "subdomain" not in actions.pods[0]["spec"]
    assert actions.service is None
    env = {e["name"]: e["value"] for e in actions.pods[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "localhost"


def test_a_new_gang_is_created_schedulable_and_pinned_with_its_service() -> None:
    j = job("llm", workers=2, gpus=8)
    result = run([j], cluster().node("n1").node("n2").view())
    actions = actions_of(result, "llm")
    assert [p["metadata"]["name"] for p in actions.pods] == ["llm-0", "llm-1"]
    assert actions.status is not None and actions.status.placement is not None
    plan = {w.rank: w.node for w in actions.status.placement.workers}
    for rank, body in enumerate(actions.pods):
        assert "schedulingGates" not in body["spec"] and body["spec"]["subdomain"] == "llm"
        affinity = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert plan[rank] in str(affinity)
        env = {e["name"]: e["value"] for e in body["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == "llm-0.llm.default.svc"
    assert actions.service is not None and actions.service["spec"]["clusterIP"] == "None"


def test_a_new_gang_waiting_for_its_old_pods_creates_nothing_yet() -> None:
    """A re-placed gang whose previous pods still terminate creates nothing yet."""
    placement = placed([("n1", [0, 1])])
    status = TrainingJobStatus(phase=JobPhase.RESCHEDULING, restarts=1, last_restart_time=at(0), placement=placement)
    j = job("llm", gpus=2, status=status)
    status.placement = PlacementStatus(generation=1)  # cleared by the restart; the old pod terminates
    old = pod(j, 0, node="n1", gpus=(0, 1), generation=1, phase="Running", deleting=True)
    actions = actions_of(run([j], cluster().node("n1").node("n2").view(), [old], now=100), "llm")
    assert actions.status is not None and actions.status.placement is not None
    assert actions.pods == []


def test_two_jobs_in_one_pass_never_share_a_gpu() -> None:
    jobs = [job(f"j{i}", gpus=2, created=i) for i in range(4)]
    result = run(jobs, cluster().node("n1").view())
    taken = [
        g
        for a in result.actions
        for w in (a.status.placement.workers if a.status and a.status.placement else [])
        for g in w.gpus
    ]
    assert len(taken) == 8 and len(set(taken)) == 8


def test_a_pass_past_its_placement_limit_runs_again_at_once_and_places_the_rest() -> None:
    jobs = [job(f"j{i}", gpus=2, created=i) for i in range(3)]
    view = cluster().node("n1").view()
    first = run_pass(
        PassInput({j.key: j for j in jobs}, {}, view, at(10)), PassRules(CONFIG, place, Limits(placements=2))
    )
    assert [r.job[1] for r in first.reservations] == ["j0", "j1"]
    assert first.wake_at == at(10) and first.queue_length == 1
    # Not tried, so not refused: j2 reports nothing yet (its status is written once, when its turn comes).
    assert [a.job[1] for a in first.actions] == ["j0", "j1"]
    second = run_pass(
        PassInput({j.key: j for j in jobs[2:]}, {}, view, at(10), first.reservations),
        PassRules(CONFIG, place, Limits(placements=2)),
    )
    assert [r.job[1] for r in second.reservations] == ["j2"]
    taken = [set(g) for plan in (*first.reservations, *second.reservations) for _, g in plan.workers]
    assert sum(len(g) for g in taken) == len(set().union(*taken)) == 6  # no GPU planned twice
    assert second.wake_at is None


def test_gpus_held_by_foreign_pods_and_the_ledger_count_as_used() -> None:
    view = cluster().node("n1").with_pods(foreign_pod("other", "n1", 4)).view()
    ledger = [PlannedGang(("default", "earlier"), 1, (("n1", (0, 1)),))]
    result = run([job("llm", gpus=4)], view, ledger=ledger)
    status = actions_of(result, "llm").status
    assert status is not None and status.phase is JobPhase.PENDING
    placed_cond = next(c for c in status.conditions if c.type == "Placed")
    assert placed_cond.status == "False" and placed_cond.reason == "Unplaceable" and placed_cond.message
    assert result.queue_length == 1


def test_a_waiting_job_starts_when_room_frees() -> None:
    j = job("llm", gpus=8)
    busy = cluster().node("n1").with_pods(foreign_pod("other", "n1", 8)).view()
    assert run([j], busy).reservations == []
    assert [r.job for r in run([j], cluster().node("n1").view()).reservations] == [j.key]


def test_the_job_runs_when_every_worker_is_bound_and_running() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement, start_time=T0))
    status = actions_of(run([j], cluster().node("n1").view(), gang(j, placement)), "llm").status
    assert status is not None and status.phase is JobPhase.RUNNING


def test_the_job_succeeds_when_every_worker_succeeds_and_ttl_deletes_it() -> None:
    placement = placed([("n1", [0, 1]), ("n2", [0, 1])])
    j = job("llm", workers=2, gpus=2, runPolicy={"ttlSecondsAfterFinished": 30}, status=running(placement))
    status = actions_of(run([j], cluster().node("n1").node("n2").view(), gang(j, placement, "Succeeded")), "llm").status
    assert status is not None and status.phase is JobPhase.SUCCEEDED and status.completion_time == at(10)
    done = job("llm", workers=2, gpus=2, runPolicy={"ttlSecondsAfterFinished": 30}, status=status)
    assert not any(a.delete_job for a in run([done], cluster().view(), now=39).actions)
    assert actions_of(run([done], cluster().view(), now=41), "llm").delete_job


def test_active_deadline_fails_the_job_and_deletes_its_pods() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, runPolicy={"activeDeadlineSeconds": 5}, status=running(placement))
    actions = actions_of(run([j], cluster().node("n1").view(), gang(j, placement)), "llm")
    assert actions.status is not None and actions.status.phase is JobPhase.FAILED
    assert next(c for c in actions.status.conditions if c.type == "Failed").reason == "DeadlineExceeded"
    assert [d.name for d in actions.deletions] == ["llm-0"]


@pytest.mark.parametrize(
    ("restarts", "max_restarts", "phase", "reason"),
    [(0, 3, JobPhase.RESCHEDULING, "WorkerFailed"), (3, 3, JobPhase.FAILED, "WorkerFailed")],
    ids=["restarts-left", "restarts-exhausted"],
)
def test_a_failed_worker_follows_the_failure_policy(
    restarts: int, max_restarts: int, phase: JobPhase, reason: str
) -> None:
    placement = placed([("n1", [0, 1]), ("n2", [0, 1])])
    status = running(placement, restarts=restarts)
    j = job("llm", workers=2, gpus=2, failurePolicy={"maxRestarts": max_restarts}, status=status)
    pods = gang(j, placement)
    pods[1] = pod(j, 1, node="n2", gpus=(0, 1), phase="Failed")
    actions = actions_of(run([j], cluster().node("n1").node("n2").view(), pods), "llm")
    assert actions.status is not None and actions.status.phase is phase
    assert {d.name for d in actions.deletions} == {"llm-0", "llm-1"}
    assert any(e.reason == reason for e in actions.events)


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


def test_a_pod_unschedulable_too_long_sends_the_job_back_to_planning() -> None:
    placement = placed([("n1", [0, 1])])
    j = job("llm", gpus=2, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))
    stuck = [pod(j, 0, gpus=(0, 1), unschedulable_since=at(0))]
    result = run([j], cluster().node("n1").node("n2").view(), stuck, now=61)
    actions = actions_of(result, "llm")
    assert [d.name for d in actions.deletions] == ["llm-0"]
    assert result.avoid == {j.key: frozenset({"n1"})}
    assert any(e.reason == "PlacementTimedOut" for e in actions.events)


def test_an_invalid_job_gets_a_clear_condition_and_is_not_queued() -> None:
    j = job(
        "llm",
        gpus=2,
        template={"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}},
    )
    result = run([j], cluster().node("n1").view())
    actions = actions_of(result, "llm")
    assert actions.status is not None
    invalid = next(c for c in actions.status.conditions if c.type == "Invalid")
    assert invalid.status == "True" and invalid.reason == "InvalidSpec" and "gpusPerWorker is 2" in invalid.message
    assert result.reservations == [] and actions.pods == []


def test_a_restarted_operator_adopts_the_pods_it_finds() -> None:
    placement = placed([("n1", [0, 1]), ("n2", [0, 1])])
    j = job("llm", workers=2, gpus=2, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))
    existing = [pod(j, 0, gpus=(0, 1))]
    actions = actions_of(run([j], cluster().node("n1").node("n2").view(), existing), "llm")
    assert [p["metadata"]["name"] for p in actions.pods] == ["llm-1"]
    assert actions.pods[0]["metadata"]["annotations"][ANNOTATION_GPUS] == "0,1"
    assert (actions.deletions == [] and actions.status is None) or actions.status.placement == placement  # type: ignore[union-attr]


def test_a_busy_job_is_not_stepped_and_its_gpus_stay_taken() -> None:
    """A job whose writes are still going out: its status holds a plan whose pods nobody has seen yet."""
    writing = job(
        "writing", gpus=8, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed([("n1", list(range(8)))]))
    )
    waiting = job("waiting", gpus=8, created=1)
    view = cluster().node("n1").view()
    jobs = {j.key: j for j in (writing, waiting)}
    result = run_pass(PassInput(jobs, {}, view, at(10), busy={writing.key}), PassRules(CONFIG, place))
    assert [a.job for a in result.actions] == [waiting.key]  # nothing is created again for the busy job
    assert result.reservations == []  # n1's 8 GPUs are the busy job's
    assert actions_of(result, "waiting").status is not None
    assert result.visible[writing.key] is None  # its pods are not shown: the ledger keeps its plan
    assert result.phases == {"Placing": 1, "Pending": 1}

    # Stepped instead, it would create its pod again.
    again = run_pass(PassInput(jobs, {}, view, at(10)), PassRules(CONFIG, place))
    assert [p["metadata"]["name"] for p in actions_of(again, "writing").pods] == ["writing-0"]


def test_a_busy_job_shows_its_generation_once_its_pods_are_seen() -> None:
    placement = placed([("n1", list(range(8)))], generation=2)
    busy = job("busy", gpus=8, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))
    seen = [pod(busy, 0, gpus=tuple(range(8)), generation=2, node="n1")]
    result = run_pass(
        PassInput({busy.key: busy}, {busy.key: seen}, cluster().node("n1").view(), at(10), busy={busy.key}),
        PassRules(CONFIG, place),
    )
    assert result.visible == {busy.key: 2} and result.actions == []


def test_gpus_two_jobs_are_said_to_share_still_count_twice() -> None:
    """devicePlugin: the kubelet gave a's pod GPUs 0,1 (planned 2,3); b was planned on 0,1 and its pod is bound
    but not yet reported. The indices collide; the GPUs cannot: four are taken, whatever their indices."""
    a, b = job("a", gpus=2), job("b", gpus=2)
    a_pod = pod(a, 0, node="n1", gpus=(2, 3), phase="Running")
    b_pod = pod(b, 0, node="n1", gpus=(0, 1), phase="Running")
    view = cluster().node("n1").holds("n1", "default", "a-0", [0, 1]).with_pods(a_pod, b_pod).view()
    used = used_gpus(view, [])["n1"]
    assert len(used) == 4 and {0, 1} <= used
    # A job is one holder, whatever says so: its pod's report, its plan and its ledger entry overlap freely.
    plan = PlannedGang(a.key, 1, (("n1", (0, 1)),))
    assert len(used_gpus(view, [plan, plan])["n1"]) == 4
