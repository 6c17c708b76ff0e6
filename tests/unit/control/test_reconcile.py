"""Control passes on plain data: a job's way from Pending to Running, and what the pass keeps apart (GPUs,
busy jobs, foreign pods, the ledger)."""

from __future__ import annotations

import pytest
from control_builders import T0, at, cluster, foreign_pod, job, pod
from pass_builders import CONFIG, actions_of, gang, placed, run, running

from gputopo.api.group import ANNOTATION_GPUS
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus
from gputopo.control.ledger import PlannedGang
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassRules, run_pass
from gputopo.control.view import used_gpus
from gputopo.placement import place


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
