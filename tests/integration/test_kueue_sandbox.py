"""Kueue's real manager beside the sandbox (``sandbox up --kueue``): its webhooks, quota admission and
Topology-Aware Scheduling on the sandbox's real kube-apiserver, kube-scheduler and Job controller.

kwok ends a Job's pods as soon as they run, and the Job and its Workload finish; a Job that must hold its quota
has its pods held by a scheduling gate of the test's (``HOLD_GATE``), as pods waiting for a placement are.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator

import pytest
from kueue_sandbox import kueue_sandbox

from gputopo.api.group import GPU_RESOURCE
from gputopo.sandbox import SandboxError, processes
from gputopo.sandbox.kueue_harness import HOLD_GATE, KueueJobs, batch_job, condition
from gputopo.sandbox.kueue_install import KUEUE_NAMESPACE
from gputopo.sandbox.kueue_queues import (
    GPU_NODE_LABELS,
    GPUTOPO_QUEUE,
    REQUIRED_TOPOLOGY,
    TAS_QUEUE,
    TOPOLOGY,
    TOPOLOGY_GATE,
    TOPOLOGY_LEVELS,
)
from gputopo.sandbox.profiles import TIER0_LABEL
from gputopo.sandbox.testing import SandboxHandle

NAME = f"{os.environ.get('GPUTOPO_TEST_SANDBOX', 'gputopo-test')}-kueue"
# Two leaf switches of four 8-GPU HGX H100 nodes under one spine: 64 GPUs.
NODES, GPUS_PER_NODE = 8, 8

box = kueue_sandbox(NAME, nodes=NODES, profile="hgx-h100", probes=False)


@pytest.fixture
def jobs(box: SandboxHandle) -> Iterator[KueueJobs]:
    """The Jobs of ``default``, where the sandbox made its LocalQueues; none left after each test."""
    handle = KueueJobs(box.kubectl, "default")
    yield handle
    handle.delete_all()


def test_sandbox_has_both_flavors_their_queues_and_the_topology(box: SandboxHandle) -> None:
    topology = box.get_json("topologies.kueue.x-k8s.io", TOPOLOGY)
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == list(TOPOLOGY_LEVELS)
    flavors = {f["metadata"]["name"]: f["spec"] for f in box.get_json("resourceflavors.kueue.x-k8s.io")["items"]}
    assert "topologyName" not in flavors[GPUTOPO_QUEUE]
    assert flavors[TAS_QUEUE]["topologyName"] == TOPOLOGY
    for name in (GPUTOPO_QUEUE, TAS_QUEUE):
        queue = box.get_json("clusterqueues.kueue.x-k8s.io", name)
        assert condition(queue, "Active")["status"] == "True", queue["status"]  # type: ignore[index]
        quotas = {r["name"]: r["nominalQuota"] for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
        assert quotas[GPU_RESOURCE] == str(NODES * GPUS_PER_NODE)
        assert box.get_json("localqueues.kueue.x-k8s.io", name, "-n", "default")["spec"]["clusterQueue"] == name
    # The manager's own certificates: its CA is in both webhook configurations.
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = box.get_json(kind, f"kueue-{kind.removesuffix('webhookconfiguration')}-webhook-configuration")
        assert all(w["clientConfig"].get("caBundle") for w in configuration["webhooks"])
    assert box.get_json("secret", "kueue-webhook-server-cert", "-n", KUEUE_NAMESPACE)["data"]["tls.crt"]


def test_a_queued_job_is_suspended_admitted_and_runs(jobs: KueueJobs) -> None:
    created = jobs.create(batch_job("admitted", GPUTOPO_QUEUE, pods=2, gpus=8))
    # Kueue's Job webhook suspends it on creation; the Job controller makes no pod until Kueue admits it.
    assert created["spec"]["suspend"] is True
    workload = jobs.wait_admitted("admitted")
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU_RESOURCE] == GPUTOPO_QUEUE
    assert assignment["count"] == 2
    pods = jobs.wait_bound("admitted", 2)
    # Kueue put the flavor's node labels into the pods' node selector when it unsuspended the Job.
    assert all(p["spec"]["nodeSelector"] == GPU_NODE_LABELS for p in pods)
    assert jobs.job("admitted")["spec"]["suspend"] is False  # type: ignore[index]
    jobs.wait_finished("admitted")


def test_a_job_over_quota_waits_until_quota_frees(jobs: KueueJobs) -> None:
    queue = jobs.create_queue("one-node", {GPU_RESOURCE: "8", "cpu": "16", "memory": "64Gi"})
    try:
        jobs.create(batch_job("first", queue, gpus=8, scheduling_gates=[HOLD_GATE]))
        jobs.wait_admitted("first")
        jobs.wait_gated("first", 1)
        jobs.create(batch_job("second", queue, gpus=8))
        waiting = jobs.wait_pending("second")
        reserved = condition(waiting, "QuotaReserved")
        assert reserved is not None and reserved["reason"] == "Pending", reserved
        assert f"insufficient unused quota for {GPU_RESOURCE}" in reserved["message"], reserved
        assert condition(waiting, "Admitted") is None or condition(waiting, "Admitted")["status"] == "False"  # type: ignore[index]
        assert jobs.job("second")["spec"]["suspend"] is True  # type: ignore[index]
        assert not jobs.pods("second")

        jobs.delete("first")
        jobs.wait_admitted("second")
        jobs.wait_bound("second", 1)
    finally:
        jobs.delete_all()
        jobs.delete_queue(queue)


def test_kueue_tas_places_a_job_within_one_leaf(jobs: KueueJobs, box: SandboxHandle) -> None:
    # Four 8-GPU pods fill one leaf of four nodes exactly: Kueue must pick a leaf and each pod's node in it.
    job = batch_job("tas", TAS_QUEUE, pods=4, gpus=8, pod_annotations={REQUIRED_TOPOLOGY: TIER0_LABEL})
    jobs.create(job)
    workload = jobs.wait_admitted("tas")
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU_RESOURCE] == TAS_QUEUE
    assert assignment["topologyAssignment"], assignment
    pods = jobs.wait_bound("tas", 4)
    # Kueue gated each pod and ungated it with its node: no pod keeps the gate, each has a host selector.
    assert not any(g["name"] == TOPOLOGY_GATE for p in pods for g in p["spec"].get("schedulingGates") or [])
    assert all("kubernetes.io/hostname" in (p["spec"].get("nodeSelector") or {}) for p in pods)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 4
    leaves = {json.loads(box.kubectl("get", "node", n, "-o", "json"))["metadata"]["labels"][TIER0_LABEL] for n in nodes}
    assert len(leaves) == 1, leaves


def test_a_killed_manager_started_again_admits_the_job_that_waited(jobs: KueueJobs, box: SandboxHandle) -> None:
    manager = box.sandbox.kueue
    old_ports = manager.ports()
    jobs.create(batch_job("before", GPUTOPO_QUEUE, gpus=8, scheduling_gates=[HOLD_GATE]))
    admitted = jobs.wait_admitted("before")
    assert processes.stop(manager.pid_file, sig=signal.SIGKILL)
    # Its webhooks fail closed: while it is gone no Job for a queue can be created.
    with pytest.raises(SandboxError, match="kueue-webhook-service"):
        jobs.create(batch_job("refused", GPUTOPO_QUEUE, gpus=8))
    box.sandbox.start_kueue(timeout=60)
    assert manager.ports() != old_ports
    # The Workload admitted before the kill is the one still admitted: the restart neither requeued nor remade it.
    assert jobs.wait_admitted("before")["metadata"]["uid"] == admitted["metadata"]["uid"]
    jobs.create(batch_job("after", GPUTOPO_QUEUE, gpus=8))
    jobs.wait_admitted("after")
    jobs.wait_bound("after", 1)
