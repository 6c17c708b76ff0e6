"""TrainingJobs under Kueue quota, on plain data: the Workload made of a job, what Kueue's conditions say, and the
pass that waits for admission, places once admitted, takes the gang down on eviction and gives the quota back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from control_builders import at, cluster, job, spec_of
from pass_builders import actions_of, gang, placed, run, running

from gputopo.api.conditions import KUEUE_ADMITTED
from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.control.facts import JobFacts, job_facts
from gputopo.control.kueue_quota import (
    LABEL_JOB_GENERATION,
    Admission,
    KueueView,
    WorkloadFacts,
    finish_patch,
    read,
    release_patch,
    workload_facts,
    workload_manifest,
    workload_name,
)
from gputopo.control.priority import PriorityClassFacts
from gputopo.control.view import ClusterView

QUEUE = "team-a"


def queued(name: str = "llm", **kw: Any) -> JobFacts:
    return replace(job(name, **kw), queue_name=QUEUE)


def workload_body(
    j: JobFacts, *conditions: tuple[str, str, str], admission: bool = False, **meta: Any
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            for t, s, r in conditions
        ]
    }
    if admission:
        status["admission"] = {"clusterQueue": "cq-a", "podSetAssignments": [{"name": "workers", "count": 1}]}
    return {
        "metadata": {
            "name": workload_name(j.name, j.uid, j.generation, QUEUE),
            "namespace": j.namespace,
            "resourceVersion": "7",
            "labels": {LABEL_JOB_GENERATION: str(j.generation)},
            "ownerReferences": [
                {
                    "apiVersion": "gputopo.io/v1alpha1",
                    "kind": "TrainingJob",
                    "name": j.name,
                    "uid": j.uid,
                    "controller": True,
                }
            ],
            **meta,
        },
        "status": status,
    }


ADMITTED = (("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"))
PENDING = (("QuotaReserved", "False", "Pending"),)
EVICTED = (*ADMITTED, ("Evicted", "True", "Preempted"))


def facts(j: JobFacts, *conditions: tuple[str, str, str], admission: bool = False) -> WorkloadFacts:
    found = workload_facts(workload_body(j, *conditions, admission=admission))
    assert found is not None
    return found


def under_kueue(view: ClusterView, *workloads: WorkloadFacts) -> ClusterView:
    by_owner: dict[str, tuple[WorkloadFacts, ...]] = {}
    for w in workloads:
        by_owner[w.owner_uid] = (*by_owner.get(w.owner_uid, ()), w)
    return replace(view, kueue=KueueView(by_owner))


def test_the_workload_of_a_job_has_its_shape_priority_queue_and_owner() -> None:
    j = queued(workers=4, gpus=8, priority=0)
    spec = spec_of(j).model_copy(update={"priority": None, "priority_class_name": "prod"})
    spec.template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4", "memory": "16Gi"}}
    spec.template["spec"]["nodeSelector"] = {"pool": "h100"}
    body = workload_manifest(j.namespace, j.name, j.uid, j.generation, spec, QUEUE, 1000)
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    assert body["metadata"]["name"] == workload_name(j.name, j.uid, 1, QUEUE)
    (owner,) = body["metadata"]["ownerReferences"]
    assert owner["kind"] == "TrainingJob" and owner["uid"] == j.uid and owner["controller"] is True
    assert "finalizers" not in body["metadata"]
    assert body["spec"]["queueName"] == QUEUE and body["spec"]["priority"] == 1000
    assert body["spec"]["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "prod"}
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["name"] == "workers" and pod_set["count"] == 4
    pod = pod_set["template"]["spec"]
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"}
    assert pod["nodeSelector"] == {"pool": "h100"} and pod["priorityClassName"] == "prod"


def test_a_workload_name_is_one_per_job_generation_and_a_valid_name() -> None:
    assert workload_name("llm", "u1", 1, "a") == workload_name("llm", "u1", 1, "a")
    names = {workload_name(*args) for args in (("llm", "u1", 1, "a"), ("llm", "u1", 2, "a"), ("llm", "u2", 1, "a"))}
    assert len(names | {workload_name("llm", "u1", 1, "b")}) == 4
    long = workload_name("x" * 253, "u1", 1, "a")
    assert len(long) <= 253 and long.startswith("trainingjob-x")


def test_workload_facts_read_kueues_conditions_and_ignore_workloads_of_others() -> None:
    j = queued()
    assert facts(j, *ADMITTED, admission=True).admitted
    waiting = facts(j, *PENDING)
    assert not waiting.admitted and waiting.waiting == "QuotaReserved Pending"
    evicted = facts(j, *EVICTED, admission=True)
    assert evicted.evicted == ("Preempted", "Evicted Preempted")
    other = workload_body(j)
    other["metadata"]["ownerReferences"][0]["kind"] = "Job"
    assert workload_facts(other) is None
    assert workload_facts({"metadata": "odd"}) is None


def test_read_decides_by_the_generation_of_an_unplaced_job_and_the_admission_of_a_placed_one() -> None:
    j = queued()
    assert read(j.name, j.uid, 1, QUEUE, [], placed=False).admission is Admission.MISSING
    assert read(j.name, j.uid, 1, QUEUE, [facts(j, *PENDING)], placed=False).admission is Admission.WAITING
    assert (
        read(j.name, j.uid, 1, QUEUE, [facts(j, *ADMITTED, admission=True)], placed=True).admission
        is Admission.ADMITTED
    )
    assert (
        read(j.name, j.uid, 1, QUEUE, [facts(j, *EVICTED, admission=True)], placed=True).admission is Admission.EVICTED
    )
    # A new generation: the running job stays under the admission it was placed with; unplaced, the old one is stale.
    old = facts(j, *ADMITTED, admission=True)
    assert read(j.name, j.uid, 2, QUEUE, [old], placed=True).admission is Admission.ADMITTED
    fresh = read(j.name, j.uid, 2, QUEUE, [old], placed=False)
    assert fresh.admission is Admission.MISSING and fresh.stale == (old,)


def test_release_and_finish_patches_are_what_kueues_job_reconciler_writes() -> None:
    w = facts(queued(), *EVICTED, admission=True)
    patch = release_patch(w, at(5))
    assert patch["metadata"] == {"resourceVersion": "7"} and patch["status"]["admission"] is None
    by_type = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert by_type["Admitted"]["status"] == "False" and by_type["Requeued"]["status"] == "True"
    assert by_type["Evicted"]["status"] == "True"  # Kueue's own: reset when it admits the Workload again
    finished = {c["type"]: c for c in finish_patch(w, True, "done", at(5))["status"]["conditions"]}["Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")


def test_a_queued_job_gets_its_workload_and_waits_for_admission() -> None:
    j = queued()
    view = replace(cluster().node("n1").view(), priority_classes={})
    result = run([j], under_kueue(view))
    actions = actions_of(result, "llm")
    assert actions.workload is not None and actions.workload["spec"]["queueName"] == QUEUE
    assert not actions.pods and not result.reservations
    assert actions.status is not None and actions.status.phase is JobPhase.PENDING
    condition = next(c for c in actions.status.conditions if c.type == KUEUE_ADMITTED)
    assert condition.status == "False" and condition.reason == "WaitingForKueue" and QUEUE in condition.message
    # Made already (a restarted operator reads it): no second one, still waiting, Kueue's words said.
    again = actions_of(run([j], under_kueue(view, facts(j, *PENDING))), "llm")
    assert again.workload is None and not again.pods
    assert again.status is not None
    assert "QuotaReserved Pending" in next(c.message for c in again.status.conditions if c.type == KUEUE_ADMITTED)


def test_an_admitted_job_is_placed_and_its_priority_class_value_goes_into_its_workload() -> None:
    j = queued(priority=0)
    spec = spec_of(j).model_copy(update={"priority": None, "priority_class_name": "prod"})
    j = replace(j, spec=spec)
    view = replace(cluster().node("n1").view(), priority_classes={"prod": PriorityClassFacts("prod", 1000)})
    made = actions_of(run([j], under_kueue(view)), "llm").workload
    assert made is not None and made["spec"]["priority"] == 1000
    actions = actions_of(run([j], under_kueue(view, facts(j, *ADMITTED, admission=True))), "llm")
    assert [p["metadata"]["name"] for p in actions.pods] == ["llm-0"]
    assert (
        actions.status is not None
        and next(c for c in actions.status.conditions if c.type == KUEUE_ADMITTED).status == "True"
    )
    # Admitted and placed in one step: one Event says both.
    assert [e.reason for e in actions.events] == ["Placed"]
    assert "admitted by ClusterQueue cq-a" in actions.events[0].message


def test_an_admitted_job_that_cannot_be_placed_yet_says_its_admission_in_an_event_of_its_own() -> None:
    j = queued(gpus=16)
    view = replace(cluster().node("n1").view(), priority_classes={})
    actions = actions_of(run([j], under_kueue(view, facts(j, *ADMITTED, admission=True))), "llm")
    assert not actions.pods
    assert [e.reason for e in actions.events][:1] == [KUEUE_ADMITTED]
    assert "admitted by ClusterQueue cq-a" in actions.events[0].message


def test_an_evicted_job_is_taken_down_then_its_admission_cleared_without_a_restart() -> None:
    plan = placed([("n1", list(range(8)))])
    j = queued(status=running(plan))
    pods = gang(j, plan)
    evicted = facts(j, *EVICTED, admission=True)
    view = under_kueue(cluster().node("n1").view(), evicted)
    actions = actions_of(run([j], view, pods), "llm")
    assert [d.name for d in actions.deletions] == ["llm-0"] and actions.deletions[0].grace_seconds == 30
    assert not actions.workload_patches  # not while a pod of it is left
    status = actions.status
    assert status is not None and status.phase is JobPhase.PENDING and status.restarts == 0
    assert status.placement is not None and not status.placement.workers
    condition = next(c for c in status.conditions if c.type == KUEUE_ADMITTED)
    assert condition.status == "False" and condition.reason == "Preempted"
    # The pods are gone: the admission is cleared for Kueue to queue the Workload again; nothing is placed.
    after = replace(j, status=status)
    cleared = actions_of(run([after], view), "llm")
    (patch,) = cleared.workload_patches
    assert patch.name == evicted.name and patch.body["status"]["admission"] is None
    assert not cleared.pods


def test_a_finished_job_marks_its_workload_finished() -> None:
    j = queued(status=TrainingJobStatus(phase=JobPhase.SUCCEEDED, completion_time=at(0)))
    actions = actions_of(run([j], under_kueue(cluster().node("n1").view(), facts(j, *ADMITTED, admission=True))), "llm")
    (patch,) = actions.workload_patches
    assert {c["type"]: c["status"] for c in patch.body["status"]["conditions"]}["Finished"] == "True"


def test_an_invalid_job_holds_no_quota() -> None:
    j = queued()
    j = replace(j, spec=spec_of(j).model_copy(update={"priority": None, "priority_class_name": "missing"}))
    w = facts(j, *ADMITTED, admission=True)
    actions = actions_of(run([j], under_kueue(cluster().node("n1").view(), w)), "llm")
    assert actions.workload_deletions == [w.name] and not actions.pods and actions.workload is None


def test_without_kueue_a_queued_job_waits_saying_so_and_an_unqueued_one_is_placed() -> None:
    view = cluster().node("n1").view()
    actions = actions_of(run([queued()], view), "llm")
    assert not actions.pods and actions.workload is None
    assert actions.status is not None
    condition = next(c for c in actions.status.conditions if c.type == KUEUE_ADMITTED)
    assert condition.reason == "KueueNotInstalled" and "kueue.x-k8s.io/v1beta2" in condition.message
    assert [p["metadata"]["name"] for p in actions_of(run([job()], view), "llm").pods] == ["llm-0"]


def test_the_queue_label_is_read_from_the_job() -> None:
    body = {"metadata": {"name": "a", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}}, "spec": {}}
    assert job_facts(body).queue_name == QUEUE
    assert job_facts({"metadata": {"name": "a"}, "spec": {}}).queue_name is None
