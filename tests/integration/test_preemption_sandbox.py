"""Preemption on the sandbox's real kube-apiserver, kube-scheduler and kube-controller-manager, with real
PriorityClasses: a TrainingJob and a PodGroup gang each clear a node of a lower-priority gang, the victims end as
their owners expect, an operator killed mid-preemption finishes it once, from what the cluster shows, and a
preemptor whose class lets it wait holds off until its victim's declared checkpoint.

Each test confines its gangs to free 8-GPU nodes (a node selector or affinity), so the cluster is full for them
alone.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from gputopo.sandbox.harness import (
    Jobs,
    OperatorProcess,
    namespace_jobs,
    namespaced_operator,
    priority_classes,
    training_job,
)
from gputopo.sandbox.testing import SandboxHandle

NS = "preempt-test"
GATE = "gputopo.io/placement"
LOW, HIGH = "gputopo-test-research", "gputopo-test-prod"
CLASSES = {LOW: 100, HIGH: 1000}


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("preemption") / "operator.log"
    with (
        priority_classes(sandbox.kubectl, CLASSES),
        namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, {}) as proc,
    ):
        yield proc


@pytest.fixture
def jobs(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(sandbox.kubectl, NS, operator) as handle:
        yield handle
        for kind in ("podgroups", "pods", "gangplacements"):
            sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)
        sandbox.kubectl("delete", "configmap", "sweep-owner", "-n", NS, "--ignore-not-found", check=False)


def free_node(sandbox: SandboxHandle) -> str:
    """An 8-GPU node no pod holds GPUs on."""
    return sandbox.free_gpu_nodes(1)[0]


def confined(name: str, node: str, priority_class: str, **spec: Any) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "trainer", "image": "pytorch"}],
        }
    }
    return training_job(name, NS, gpusPerWorker=8, template=template, priorityClassName=priority_class, **spec)


def reasons(jobs: Jobs, name: str) -> set[str]:
    return {e.get("reason", "") for e in jobs.events(name)}


def wait_preempted(jobs: Jobs, name: str, by: str) -> dict[str, Any]:
    """The victim's status once it is Preempted by ``by`` and its pods are gone."""

    def preempted() -> dict[str, Any] | None:
        status = jobs.status(name)
        condition = next((c for c in status.get("conditions") or [] if c["type"] == "Preempted"), None)
        gone = not [p for p in jobs.pods(name) if not p["metadata"].get("deletionTimestamp")]
        return status if condition and condition["status"] == "True" and by in condition["message"] and gone else None

    found: dict[str, Any] = jobs.wait(f"{name} preempted by {by}", preempted, timeout=90)
    return found


def test_a_high_priority_training_job_preempts_a_lower_one_and_takes_its_node(
    sandbox: SandboxHandle, jobs: Jobs
) -> None:
    node = free_node(sandbox)
    jobs.apply(confined("low", node, LOW, failurePolicy={"gracePeriodSeconds": 2}))
    jobs.wait_phase("low", "Running", timeout=90)
    low_pod = jobs.wait_running_pods("low", 1)[0]
    assert low_pod["spec"]["priorityClassName"] == LOW and low_pod["spec"]["priority"] == 100
    jobs.apply(confined("high", node, HIGH))
    status = wait_preempted(jobs, "low", f"{NS}/high")
    assert status["restarts"] == 0  # a preemption charges no restart
    assert status["preemption"]["count"] == 1 and status["preemption"]["preemptedBy"] == [f"{NS}/high"]
    assert status["phase"] == "Pending"
    high = jobs.wait_phase("high", "Running", timeout=90)
    assert [w["node"] for w in high["placement"]["workers"]] == [node]
    assert "nomination" not in high  # cleared once placed
    assert jobs.wait_running_pods("high", 1)[0]["spec"]["priority"] == 1000
    assert "Preempted" in reasons(jobs, "low") and "Preempting" in reasons(jobs, "high")
    # The victim waits behind the nomination's holder: queued, not placed, not restarted.
    placed = jobs.condition("low", "Placed")
    assert placed is not None and placed["status"] == "False"
    assert len(jobs.pods("high")) == 1 and not [p for p in jobs.pods("low") if p["status"].get("phase") == "Running"]


def test_preemption_policy_never_waits_instead(sandbox: SandboxHandle, jobs: Jobs) -> None:
    never = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "gputopo-test-never"},
        "value": 5000,
        "preemptionPolicy": "Never",
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(never))
    try:
        node = free_node(sandbox)
        jobs.apply(confined("low", node, LOW))
        jobs.wait_phase("low", "Running", timeout=90)
        jobs.apply(confined("polite", node, "gputopo-test-never"))
        condition = jobs.wait("polite unplaceable", lambda: jobs.condition("polite", "Placed"), timeout=60)
        assert condition["status"] == "False" and condition["reason"] != "Preempting"
        assert jobs.status("low")["phase"] == "Running"
        assert "nomination" not in jobs.status("polite")
    finally:
        sandbox.kubectl("delete", "priorityclass", "gputopo-test-never", "--ignore-not-found", check=False)


def test_an_unknown_priority_class_is_invalid_naming_the_field(jobs: Jobs) -> None:
    jobs.apply(training_job("typo", NS, priorityClassName="gputopo-test-gold"))
    condition = jobs.wait("Invalid condition", lambda: jobs.condition("typo", "Invalid"))
    assert condition["status"] == "True"
    assert "spec.priorityClassName: no PriorityClass named 'gputopo-test-gold'" in condition["message"]


def test_the_crd_refuses_both_a_class_and_the_deprecated_priority(sandbox: SandboxHandle) -> None:
    manifest = training_job("both", NS, priorityClassName=LOW, priority=5)
    argv = [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), "create", "-f", "-"]
    out = subprocess.run(argv, input=json.dumps(manifest), capture_output=True, text=True, check=False)
    assert out.returncode != 0
    assert "spec.priority: Invalid value" in out.stderr
    assert "set priorityClassName or the deprecated priority, not both" in out.stderr


def _group_pod(name: str, node: str, group: str = "urgent", priority_class: str = HIGH) -> dict[str, Any]:
    spec = {
        "restartPolicy": "Never",
        "priorityClassName": priority_class,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "schedulingGates": [{"name": GATE}],
        "schedulingGroup": {"podGroupName": group},
        "containers": [{"name": "trainer", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def test_a_podgroup_gang_preempts_a_lower_priority_training_job(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = free_node(sandbox)
    jobs.apply(confined("low", node, LOW, failurePolicy={"gracePeriodSeconds": 1}))
    jobs.wait_phase("low", "Running", timeout=90)
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "urgent", "namespace": NS},
        # The group's priority is its own: with no class the API server gives it 0, whatever its pods'.
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "priorityClassName": HIGH},
    }
    sandbox.kubectl("create", "-f", "-", input=json.dumps(group))
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_group_pod("urgent-0", node)))
    wait_preempted(jobs, "low", f"{NS}/podgroup/urgent")

    def running() -> dict[str, Any] | None:
        out = sandbox.kubectl("get", "gangplacement", "podgroup-urgent", "-n", NS, "-o", "json", check=False)
        record = json.loads(out) if out.strip().startswith("{") else {}
        return record if (record.get("status") or {}).get("phase") == "Running" else None

    record = jobs.wait("the PodGroup gang running", running, timeout=90)
    assert [r["node"] for r in record["status"]["ranks"]] == [node]
    assert "nomination" not in record["status"]
    pod = sandbox.get_json("pod", "urgent-0", "-n", NS)
    assert pod["spec"]["nodeName"] == node and not pod["spec"].get("schedulingGates")


def test_a_lower_priority_podgroup_gang_is_evicted_whole_for_its_owner_to_make_again(
    sandbox: SandboxHandle, jobs: Jobs
) -> None:
    node = free_node(sandbox)
    owner = json.loads(
        sandbox.kubectl(
            "create", "configmap", "sweep-owner", "-n", NS, "-o", "json", "--from-literal=role=stand-in-controller"
        )
    )
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "sweep", "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "priorityClassName": LOW},
    }
    sandbox.kubectl("create", "-f", "-", input=json.dumps(group))
    pod = _group_pod("sweep-0", node, group="sweep", priority_class=LOW)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "sweep-owner", "uid": owner["metadata"]["uid"],
         "controller": True}
    ]  # fmt: skip
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    sandbox.kubectl("create", "-f", "-", input=json.dumps(pod))

    def record(phase: str) -> Any:
        out = sandbox.kubectl("get", "gangplacement", "podgroup-sweep", "-n", NS, "-o", "json", check=False)
        found = json.loads(out) if out.strip().startswith("{") else {}
        return found if (found.get("status") or {}).get("phase") == phase else None

    jobs.wait("the low gang running", lambda: record("Running"), timeout=90)
    jobs.apply(confined("high", node, HIGH))
    high = jobs.wait_phase("high", "Running", timeout=120)
    assert [w["node"] for w in high["placement"]["workers"]] == [node]
    gang = jobs.wait("the low gang preempted", lambda: record("Preempted"))
    assert gang["status"]["preemption"]["preemptedBy"] == [f"{NS}/high"]
    assert gang["status"]["restarts"] == 0 and gang["status"]["ranks"] == []
    out = sandbox.kubectl("get", "pod", "sweep-0", "-n", NS, "--ignore-not-found", "-o", "name")
    assert not out.strip()  # evicted: its owner would make it again, gated
    events = json.loads(sandbox.kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
    assert any(e.get("reason") == "GangPreempted" for e in events)


def test_kill_9_mid_preemption_finishes_it_once_from_the_nomination(
    sandbox: SandboxHandle, jobs: Jobs, operator: OperatorProcess
) -> None:
    node = free_node(sandbox)
    jobs.apply(confined("low", node, LOW, failurePolicy={"gracePeriodSeconds": 5}))
    jobs.wait_phase("low", "Running", timeout=90)
    jobs.apply(confined("high", node, HIGH))
    jobs.wait("the nomination recorded", lambda: jobs.status("high").get("nomination"), timeout=60, every=0.02)
    operator.kill()
    operator.start()
    high = jobs.wait_phase("high", "Running", timeout=120)
    status = wait_preempted(jobs, "low", f"{NS}/high")
    assert status["preemption"]["count"] == 1 and status["restarts"] == 0
    assert [w["node"] for w in high["placement"]["workers"]] == [node]
    assert len(jobs.pods("high")) == 1
    assert "nomination" not in jobs.status("high")


# -- waiting for the victim's checkpoint -------------------------------------------------------------------------

PATIENT = "gputopo-test-patient"
INTERVAL = 70  # the victim's checkpoints: every 70 s from its placement


def spread(name: str, nodes: list[str], priority_class: str, **spec: Any) -> dict[str, Any]:
    """A TrainingJob of one 8-GPU worker per node of ``nodes``, on those nodes only."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    template = {
        "spec": {"affinity": {"nodeAffinity": required}, "containers": [{"name": "trainer", "image": "pytorch"}]}
    }
    return training_job(
        name, NS, workers=len(nodes), gpusPerWorker=8, template=template, priorityClassName=priority_class, **spec
    )


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_preemptor_of_a_patient_class_waits_for_the_victims_checkpoint_then_preempts(
    sandbox: SandboxHandle, jobs: Jobs
) -> None:
    """The class may wait 120 s; the victim (32 GPUs on four nodes) checkpoints every 70 s from its placement. The
    8-GPU preemptor comes 20-27 s before a checkpoint, when preempting would lose the victim over 900 GPU-seconds
    more than waiting idles it: it waits, saying so, and preempts at the checkpoint.

    Times are the operator's clock (this machine's): the victim's placement time is its Placed condition's."""
    patient = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PATIENT, "annotations": {"gputopo.io/checkpoint-wait-seconds": "120"}},
        "value": 1000,
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(patient))
    try:
        nodes = sandbox.free_gpu_nodes(4)
        low = spread(
            "low",
            nodes,
            LOW,
            gpu={"sameModel": False},
            failurePolicy={"gracePeriodSeconds": 1},
            preemption={"checkpointIntervalSeconds": INTERVAL},
        )
        jobs.apply(low)
        jobs.wait_phase("low", "Running", timeout=90)
        placed = jobs.condition("low", "Placed")
        assert placed is not None and placed["status"] == "True"
        start = _seconds(placed["lastTransitionTime"])
        # Arrive 20-27 s before a checkpoint, at least 42 s after the last: 32 GPUs x 42 s lost now against
        # 8 GPUs x 27 s idle is 1128 GPU-seconds spared, over the 900 that make a wait worth it.
        earliest = max(time.time(), start + 42)
        checkpoint = start + math.ceil((earliest + 20 - start) / INTERVAL) * INTERVAL
        arrive = max(checkpoint - 27, earliest)
        time.sleep(max(0.0, arrive - time.time()))  # until a computed instant, not for something to happen
        jobs.apply(confined("high", nodes[0], PATIENT))

        def waiting() -> dict[str, Any] | None:
            found = jobs.condition("high", "Placed")
            return found if found is not None and found["reason"] == "WaitingForCheckpoint" else None

        left = max(1.0, checkpoint - 3 - time.time())
        condition = jobs.wait("high waiting for the checkpoint", waiting, timeout=left)
        assert condition["status"] == "False"
        assert f"for the next checkpoint of {NS}/low" in condition["message"]
        assert time.time() < checkpoint - 2, "the wait was seen too late to tell it from a preemption"
        time.sleep(max(0.0, checkpoint - 2 - time.time()))  # just before the checkpoint: still nobody preempted
        low_now = jobs.status("low")
        assert low_now["phase"] == "Running" and "preemption" not in low_now
        high_now = jobs.status("high")
        assert "nomination" not in high_now
        assert [c["reason"] for c in high_now["conditions"] if c["type"] == "Placed"] == ["WaitingForCheckpoint"]

        status = wait_preempted(jobs, "low", f"{NS}/high")
        assert _seconds(status["preemption"]["lastPreemptedAt"]) >= checkpoint  # at the checkpoint, not before
        high = jobs.wait_phase("high", "Running", timeout=90)
        assert [w["node"] for w in high["placement"]["workers"]] == [nodes[0]]
        said = [e for e in jobs.events("high") if e.get("reason") == "WaitingForCheckpoint"]
        assert len(said) == 1, said  # said once, not once per pass
        assert "Preempting" in reasons(jobs, "high")
    finally:
        sandbox.kubectl("delete", "priorityclass", PATIENT, "--ignore-not-found", check=False)
