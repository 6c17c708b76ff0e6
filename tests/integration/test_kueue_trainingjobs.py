"""TrainingJobs under Kueue quota, with Kueue v0.17.0's real manager beside the sandbox (``sandbox up --kueue``).

A TrainingJob labelled ``kueue.x-k8s.io/queue-name`` gets a Workload from gputopo and is placed only once Kueue
admits it; over quota it waits, Kueue's preemption takes its gang down and it runs again once quota is back, its
Workload goes with it, and an operator killed before the admission makes no second Workload.

Each test has a ClusterQueue of its own (8 GPUs, one node's worth) and a LocalQueue of the same name in ``NS``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from kueue_sandbox import kueue_sandbox

from gputopo.api.group import GPU_RESOURCE
from gputopo.sandbox.harness import (
    Jobs,
    OperatorProcess,
    namespace_jobs,
    namespaced_operator,
    priority_classes,
    training_job,
)
from gputopo.sandbox.kueue_harness import HOLD_GATE, KueueJobs, batch_job, condition
from gputopo.sandbox.kueue_queues import GPUTOPO_QUEUE, QUEUE_LABEL, cluster_queue, local_queue
from gputopo.sandbox.testing import SandboxHandle

NAME = f"{os.environ.get('GPUTOPO_TEST_SANDBOX', 'gputopo-test')}-kueue-tj"
NS = "kueue-tj"
LOW, HIGH = "gputopo-kueue-low", "gputopo-kueue-high"
QUOTA = {GPU_RESOURCE: "8", "cpu": "64", "memory": "256Gi"}

box = kueue_sandbox(NAME, nodes=2, profile="hgx-h100")


@pytest.fixture(scope="module")
def operator(box: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("kueue-tj") / "operator.log"
    with (
        priority_classes(box.kubectl, {LOW: 100, HIGH: 1000}),
        namespaced_operator(box.kubectl, box.kubeconfig, log_file, NS, {}) as proc,
    ):
        yield proc


@pytest.fixture
def jobs(box: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(box.kubectl, NS, operator) as handle:
        yield handle
    # Once the TrainingJobs are gone (their Workloads would be made again while they are not), Kueue's Jobs too.
    KueueJobs(box.kubectl, NS).delete_all()


def apply_queue(
    box: SandboxHandle, name: str, quota: dict[str, str], *, cohort: str | None = None, **preemption: str
) -> str:
    """A ClusterQueue ``name`` of the sandbox's flavor without a topology, with ``quota`` and ``preemption``, in
    ``cohort``, and its LocalQueue in ``NS``; returns once Kueue calls it Active."""
    body = cluster_queue(name, GPUTOPO_QUEUE, quota, cohort=cohort)
    if preemption:
        body["spec"]["preemption"] = preemption
    items = [body, local_queue(name, NS, name)]
    box.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    box.wait_for(
        f"ClusterQueue {name} active", lambda: is_true(box.get_json("clusterqueues.kueue.x-k8s.io", name), "Active")
    )
    return name


@pytest.fixture
def queue(box: SandboxHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A ClusterQueue of 8 GPUs that preempts lower priorities within itself, and its LocalQueue in ``NS``; a test
    asks for it before ``jobs``, so it goes after the test's TrainingJobs and Workloads."""
    name = f"tj-{request.node.name.removeprefix('test_')[:40].replace('_', '-').rstrip('-')}"
    yield apply_queue(box, name, QUOTA, withinClusterQueue="LowerPriority")
    KueueJobs(box.kubectl, NS).delete_queue(name)


def queued(name: str, queue: str, **spec: Any) -> dict[str, Any]:
    job = training_job(name, NS, **spec)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def workloads(box: SandboxHandle, job: str) -> list[dict[str, Any]]:
    """The Workloads a TrainingJob owns."""
    items = box.get_json("workloads.kueue.x-k8s.io", "-n", NS)["items"]
    return [
        w
        for w in items
        if any(
            o.get("kind") == "TrainingJob" and o.get("name") == job for o in w["metadata"].get("ownerReferences") or []
        )
    ]


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    return (condition(obj, type_) or {}).get("status") == "True"


def waiting_for_kueue(jobs: Jobs, name: str) -> dict[str, Any] | None:
    found = jobs.condition(name, "KueueAdmitted")
    return found if found is not None and found["status"] == "False" else None


def test_a_job_over_quota_waits_and_is_placed_when_quota_frees(box: SandboxHandle, queue: str, jobs: Jobs) -> None:
    jobs.apply(queued("first", queue))
    jobs.wait_running_pods("first", 1, timeout=90)
    (workload,) = workloads(box, "first")
    assert is_true(workload, "Admitted")
    assert workload["spec"]["queueName"] == queue and workload["spec"]["podSets"][0]["count"] == 1
    owner = workload["metadata"]["ownerReferences"][0]
    assert owner["controller"] is True and owner["uid"] == jobs.get("first")["metadata"]["uid"]  # type: ignore[index]
    assert jobs.condition("first", "KueueAdmitted")["status"] == "True"  # type: ignore[index]

    jobs.apply(queued("second", queue))
    said = jobs.wait("second waiting for Kueue", lambda: waiting_for_kueue(jobs, "second"), timeout=60)
    assert said["reason"] == "WaitingForKueue" and f"LocalQueue {queue}" in said["message"], said
    jobs.wait(
        "Kueue's reason in second's condition",
        lambda: "insufficient unused quota" in (waiting_for_kueue(jobs, "second") or {}).get("message", ""),
        timeout=60,
    )
    assert jobs.status("second")["phase"] == "Pending" and not jobs.pods("second")

    # The first job's worker ends: the job succeeds, its Workload is Finished and its quota goes to the second.
    jobs.finish_pod("first-0")
    jobs.wait_phase("first", "Succeeded", timeout=60)
    jobs.wait("first's Workload finished", lambda: is_true(workloads(box, "first")[0], "Finished"), timeout=60)
    jobs.wait_running_pods("second", 1, timeout=90)
    assert len(workloads(box, "second")) == 1


def test_kueue_preemption_takes_the_job_down_and_it_runs_again_once_quota_is_back(
    box: SandboxHandle, queue: str, jobs: Jobs
) -> None:
    jobs.apply(queued("low", queue, priorityClassName=LOW, failurePolicy={"gracePeriodSeconds": 2}))
    jobs.wait_running_pods("low", 1, timeout=90)
    first = jobs.status("low")["placement"]["generation"]
    (workload,) = workloads(box, "low")
    assert workload["spec"]["priority"] == 100
    assert workload["spec"]["priorityClassRef"]["name"] == LOW

    # A higher-priority Job in the same ClusterQueue: Kueue preempts the TrainingJob's Workload for it. Its pod is
    # held by a gate of the test's, so it keeps the quota while the TrainingJob waits.
    kueue = KueueJobs(box.kubectl, NS)
    high = batch_job("high", queue, gpus=8, scheduling_gates=[HOLD_GATE])
    high["spec"]["template"]["spec"]["priorityClassName"] = HIGH
    kueue.create(high)

    def evicted() -> dict[str, Any] | None:
        said = waiting_for_kueue(jobs, "low")
        return said if said is not None and said["reason"] == "Preempted" else None

    said = jobs.wait("low evicted by Kueue", evicted, timeout=90)
    assert "Kueue evicted Workload" in said["message"], said
    kueue.wait_admitted("high", timeout=90)  # only once gputopo cleared low's admission
    jobs.wait("low's pods gone", lambda: not jobs.pods("low"), timeout=60)
    status = jobs.status("low")
    assert status["phase"] == "Pending" and status["restarts"] == 0
    assert not (status.get("placement") or {}).get("workers")
    (workload,) = workloads(box, "low")
    assert not is_true(workload, "QuotaReserved") and "admission" not in workload["status"]
    assert is_true(workload, "Requeued")
    assert not box.get_json("resourceclaims", "-n", NS)["items"]
    # Its GPUs are free in gputopo's view too: a job outside Kueue that needs every GPU of the sandbox is placed.
    jobs.apply(training_job("filler", NS, workers=2))
    jobs.wait_running_pods("filler", 2, timeout=90)
    jobs.delete("filler")
    jobs.wait("filler's pods gone", lambda: not jobs.pods("filler"), timeout=60)

    # The high Job goes: quota is back, Kueue admits low's Workload again (the same one) and gputopo places it.
    kueue.delete("high")
    jobs.wait_running_pods("low", 1, timeout=120)
    assert jobs.status("low")["placement"]["generation"] == first + 1
    assert [w["metadata"]["uid"] for w in workloads(box, "low")] == [workload["metadata"]["uid"]]
    assert jobs.condition("low", "KueueAdmitted")["status"] == "True"  # type: ignore[index]
    assert jobs.status("low")["restarts"] == 0


@pytest.fixture
def cohort(box: SandboxHandle) -> Iterator[tuple[str, str]]:
    """A lender ClusterQueue of 8 GPUs that reclaims them within its cohort, and a borrower without quota of its
    own in the same cohort, each with its LocalQueue in ``NS``."""
    lender = apply_queue(box, "tj-lender", QUOTA, cohort="tj-cohort", reclaimWithinCohort="Any")
    borrower = apply_queue(box, "tj-borrower", dict.fromkeys(QUOTA, "0"), cohort="tj-cohort")
    yield lender, borrower
    for name in (borrower, lender):
        KueueJobs(box.kubectl, NS).delete_queue(name)


def test_kueue_reclaiming_its_quota_across_a_cohort_takes_the_job_down_and_it_runs_again(
    box: SandboxHandle, cohort: tuple[str, str], jobs: Jobs
) -> None:
    lender, borrower = cohort
    kueue = KueueJobs(box.kubectl, NS)
    jobs.apply(queued("borrowing", borrower, failurePolicy={"gracePeriodSeconds": 2}))
    jobs.wait_running_pods("borrowing", 1, timeout=90)
    assert workloads(box, "borrowing")[0]["status"]["admission"]["clusterQueue"] == borrower

    # Work of the lender's own reclaims its quota: Kueue preempts the borrowing Workload, whatever its priority.
    kueue.create(batch_job("reclaim", lender, gpus=8, scheduling_gates=[HOLD_GATE]))

    def evicted() -> dict[str, Any] | None:
        said = waiting_for_kueue(jobs, "borrowing")
        return said if said is not None and said["reason"] == "Preempted" else None

    jobs.wait("the borrowing job evicted by Kueue", evicted, timeout=90)
    kueue.wait_admitted("reclaim", timeout=90)
    jobs.wait("its pods gone", lambda: not jobs.pods("borrowing"), timeout=60)
    assert jobs.status("borrowing")["restarts"] == 0

    kueue.delete("reclaim")
    jobs.wait_running_pods("borrowing", 1, timeout=120)
    assert len(workloads(box, "borrowing")) == 1


def test_deleting_the_job_deletes_its_workload(box: SandboxHandle, queue: str, jobs: Jobs) -> None:
    jobs.apply(queued("gone", queue))
    jobs.wait("its Workload", lambda: workloads(box, "gone"), timeout=60)
    jobs.delete("gone")
    # The garbage collector deletes it with its owner; it learns of Kueue's CRDs at its next discovery (30 s).
    jobs.wait("the Workload gone", lambda: not workloads(box, "gone"), timeout=90, every=1.0)


def test_an_operator_killed_before_the_admission_makes_no_second_workload_and_places_the_job_once(
    box: SandboxHandle, queue: str, jobs: Jobs, operator: OperatorProcess
) -> None:
    # No quota yet: the Workload is made and waits.
    zero = cluster_queue(queue, GPUTOPO_QUEUE, {**QUOTA, GPU_RESOURCE: "0"})
    box.kubectl("apply", "-f", "-", input=json.dumps(zero))
    jobs.apply(queued("once", queue))
    jobs.wait("its Workload", lambda: workloads(box, "once"), timeout=60, every=0.05)
    operator.kill()
    operator.start()
    jobs.wait("once waiting for Kueue", lambda: waiting_for_kueue(jobs, "once"), timeout=60)
    box.kubectl("apply", "-f", "-", input=json.dumps(cluster_queue(queue, GPUTOPO_QUEUE, QUOTA)))
    jobs.wait_running_pods("once", 1, timeout=120)
    assert len(workloads(box, "once")) == 1
    status = jobs.status("once")
    assert status["placement"]["generation"] == 1 and status["restarts"] == 0
    placed = [e for e in jobs.events("once") if e.get("reason") == "Placed"]
    assert sum(e.get("count", 1) for e in placed) == 1, placed
    assert operator.running, operator.log_tail()
