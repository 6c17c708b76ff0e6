"""Re-placement on the sandbox: faults go in below the probe (fake NVML/sysfs, kwok), never into NodeTopology."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.sandbox.faults import gpu_fault, link_fault, nic_fault, node_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespaced_operator, training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "failover-test"
FAST = {"backoffSeconds": 0, "gracePeriodSeconds": 0, "cooldownSeconds": 0}


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("failover") / "operator.log"
    with namespaced_operator(
        sandbox.kubectl,
        sandbox.kubeconfig,
        log_file,
        NS,
        {"GPUTOPO_NODE_NOT_READY_GRACE_SECONDS": "3", "GPUTOPO_QUARANTINE_SECONDS": "30"},
    ) as proc:
        yield proc


def _nvswitch_or_nvlink_node(sandbox: SandboxHandle) -> str:
    for node in sandbox.nodes:
        links = sandbox.get_json("nodetopology", node)["status"].get("links") or []
        if any(link["kind"] in ("NVSwitch", "NVLink") for link in links):
            return node
    pytest.skip("no NVLink node in the sandbox")


def _direct_nvlink_node(sandbox: SandboxHandle) -> str:
    """A node whose GPUs pair over direct NVLinks (no NVSwitch): NVIDIA's device plugin scores those links, so
    with one Down it hands out another pair, and a pinned job can move to healthy GPUs on the same node."""
    for node in sandbox.nodes:
        links = sandbox.get_json("nodetopology", node)["status"].get("links") or []
        if any(link["kind"] == "NVLink" for link in links) and not any(link["kind"] == "NVSwitch" for link in links):
            return node
    pytest.skip("no direct-NVLink node in the sandbox")


def _pin(node: str) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [{"name": "trainer", "image": "pytorch"}],
            "nodeSelector": {"kubernetes.io/hostname": node},
        }
    }


def _worker(jobs: Jobs, name: str, rank: int = 0) -> dict[str, Any]:
    worker: dict[str, Any] = jobs.status(name)["placement"]["workers"][rank]
    return worker


def _events(jobs: Jobs, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in jobs.events(name) if e.get("reason") == reason]


def test_link_down_in_a_used_pair_re_places_on_healthy_gpus(sandbox: SandboxHandle, jobs: Jobs) -> None:
    # Direct NVLinks, not an NVSwitch board: in devicePlugin mode the plugin scores NVSwitch pairs by their PCIe
    # level only, so once the old pod is gone it would hand the pair with the Down link out again, and the
    # operator rightly refuses that plan; over direct NVLinks the plugin itself avoids the Down link.
    node = _direct_nvlink_node(sandbox)
    jobs.apply(training_job("linkjob", NS, gpusPerWorker=2, template=_pin(node), failurePolicy=FAST))
    jobs.wait_running_pods("linkjob", 1)
    a, b = _worker(jobs, "linkjob")["gpus"]
    link_fault(sandbox.sandbox, node, a, b, "down")
    try:
        status = jobs.wait("restart counted", lambda: (s := jobs.status("linkjob")).get("restarts", 0) >= 1 and s)
        jobs.wait_running_pods("linkjob", 1, timeout=60)
        status = jobs.wait_phase("linkjob", "Running")
        assert not {a, b} <= set(status["placement"]["workers"][0]["gpus"])
        assert status["restarts"] == 1
        assert _events(jobs, "linkjob", "LinkDown")
    finally:
        link_fault(sandbox.sandbox, node, a, b, "up")


def test_link_down_in_unused_gpus_changes_nothing(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = _nvswitch_or_nvlink_node(sandbox)
    jobs.apply(training_job("calm", NS, gpusPerWorker=2, template=_pin(node), failurePolicy=FAST))
    pod_uid = jobs.wait_running_pods("calm", 1)[0]["metadata"]["uid"]
    used = set(_worker(jobs, "calm")["gpus"])
    a, b = [g for g in range(8) if g not in used][:2]
    link_fault(sandbox.sandbox, node, a, b, "down")
    try:
        # The probe publishes at a 1 s interval: give it three rounds to show the fault, then look.
        jobs.wait(
            "fault visible",
            lambda: any(
                link["state"] == "Down" and {link["a"], link["b"]} == {a, b}
                for link in sandbox.get_json("nodetopology", node)["status"]["links"]
            ),
            timeout=15,
        )
        time.sleep(3)  # the operator reacts within 100 ms; a decision taken would show by now
        assert jobs.status("calm").get("restarts", 0) == 0
        assert jobs.pods("calm")[0]["metadata"]["uid"] == pod_uid
    finally:
        link_fault(sandbox.sandbox, node, a, b, "up")


def _rails_job(jobs: Jobs, name: str, min_busbw: float) -> dict[str, Any]:
    jobs.apply(
        training_job(
            name,
            NS,
            workers=2,
            gpusPerWorker=8,
            topology={"minBusBandwidthGBps": min_busbw, "interNode": {"requiredTier": 1}},
            failurePolicy={**FAST, "onLinkFailure": "Tolerate"},
        )
    )
    jobs.wait_running_pods(name, 2)
    return jobs.wait_phase(name, "Running")


def test_nic_down_with_tolerate_and_enough_bandwidth_keeps_running(sandbox: SandboxHandle, jobs: Jobs) -> None:
    status = _rails_job(jobs, "tolerant", min_busbw=1)
    worker = status["placement"]["workers"][0]
    if not worker["nics"]:
        pytest.skip("placed on nodes without RDMA NICs")
    before = status["placement"]["estimatedBusBandwidthGBps"]
    nic_fault(sandbox.sandbox, worker["node"], worker["nics"][0], "down")
    try:
        degraded = jobs.wait(
            "Degraded condition", lambda: (c := jobs.condition("tolerant", "Degraded")) and c["status"] == "True" and c
        )
        assert degraded["reason"] == "NicDown"
        status = jobs.status("tolerant")
        assert status["restarts"] == 0 and status["phase"] == "Running"
        assert status["placement"]["estimatedBusBandwidthGBps"] <= before
    finally:
        nic_fault(sandbox.sandbox, worker["node"], worker["nics"][0], "up")


def test_nic_down_with_tolerate_below_the_minimum_re_places(sandbox: SandboxHandle, jobs: Jobs) -> None:
    status = _rails_job(jobs, "demanding", min_busbw=1)
    worker = status["placement"]["workers"][0]
    if not worker["nics"]:
        pytest.skip("placed on nodes without RDMA NICs")
    # Raise the minimum to what the gang has now: any lost rail goes below it.
    minimum = status["placement"]["estimatedBusBandwidthGBps"]
    jobs.kubectl(
        "patch",
        "trainingjob",
        "demanding",
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"topology": {"minBusBandwidthGBps": minimum}}}),
    )
    nic_fault(sandbox.sandbox, worker["node"], worker["nics"][0], "down")
    try:
        jobs.wait("re-placed", lambda: jobs.status("demanding").get("restarts") == 1, timeout=30)
        jobs.wait_running_pods("demanding", 2, timeout=60)
    finally:
        nic_fault(sandbox.sandbox, worker["node"], worker["nics"][0], "up")


def test_flapping_link_restarts_at_most_once_per_cooldown(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = _nvswitch_or_nvlink_node(sandbox)
    policy = {**FAST, "cooldownSeconds": 60, "maxRestarts": 10}
    jobs.apply(training_job("flappy", NS, gpusPerWorker=8, template=_pin(node), failurePolicy=policy))
    jobs.wait_running_pods("flappy", 1)
    deadline = time.monotonic() + 10
    state = "down"
    while time.monotonic() < deadline:
        link_fault(sandbox.sandbox, node, 0, 1, state)  # type: ignore[arg-type]
        state = "up" if state == "down" else "down"
        time.sleep(0.5)
    link_fault(sandbox.sandbox, node, 0, 1, "up")
    assert jobs.status("flappy").get("restarts", 0) <= 1


def test_node_not_ready_past_the_grace_re_places(sandbox: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("orphaned", NS, gpusPerWorker=2, failurePolicy=FAST))
    jobs.wait_running_pods("orphaned", 1)
    node = _worker(jobs, "orphaned")["node"]
    node_fault(sandbox.sandbox, node, "not-ready")
    try:
        jobs.wait("restart counted", lambda: jobs.status("orphaned").get("restarts") == 1, timeout=30)
        pods = jobs.wait_running_pods("orphaned", 1, timeout=60)
        assert pods[0]["spec"]["nodeName"] != node
        assert _events(jobs, "orphaned", "NodeNotReady")
    finally:
        node_fault(sandbox.sandbox, node, "ready")


def test_max_restarts_exhausted_fails_with_the_reason(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = _nvswitch_or_nvlink_node(sandbox)
    policy = {**FAST, "maxRestarts": 0}
    jobs.apply(training_job("fragile", NS, gpusPerWorker=2, template=_pin(node), failurePolicy=policy))
    jobs.wait_running_pods("fragile", 1)
    a, b = _worker(jobs, "fragile")["gpus"]
    link_fault(sandbox.sandbox, node, a, b, "down")
    try:
        jobs.wait_phase("fragile", "Failed", timeout=30)
        failed = jobs.condition("fragile", "Failed")
        assert failed is not None and failed["reason"] == "RestartsExhausted"
        assert "LinkDown" in failed["message"] or "Down" in failed["message"]
    finally:
        link_fault(sandbox.sandbox, node, a, b, "up")


def test_operator_restarted_during_a_re_placement_finishes_it_without_duplicates(
    sandbox: SandboxHandle, jobs: Jobs, operator: OperatorProcess
) -> None:
    # A GPU of the gang fails (XID 79), not a link: the job is pinned to this node, and in devicePlugin mode a
    # Down link between the two GPUs the plugin prefers would leave it nowhere to go (the plugin cannot see
    # links, so it would hand out that pair again, and the operator refuses a plan over a Down link).
    node = _nvswitch_or_nvlink_node(sandbox)
    jobs.apply(training_job("phoenix", NS, gpusPerWorker=2, template=_pin(node), failurePolicy=FAST))
    jobs.wait_running_pods("phoenix", 1)
    a, _ = _worker(jobs, "phoenix")["gpus"]
    gpu_fault(sandbox.sandbox, node, a, xid=79)
    try:
        jobs.wait("restart counted", lambda: jobs.status("phoenix").get("restarts") == 1, timeout=30, every=0.02)
        operator.kill()
        operator.start()
        pods = jobs.wait_running_pods("phoenix", 1, timeout=90)
        assert [p["metadata"]["name"] for p in pods] == ["phoenix-0"]
        status = jobs.wait_phase("phoenix", "Running")
        assert status["restarts"] == 1
        assert pods[0]["metadata"]["annotations"]["gputopo.io/gpus"] == ",".join(
            map(str, status["placement"]["workers"][0]["gpus"])
        )
        assert a not in status["placement"]["workers"][0]["gpus"]
    finally:
        gpu_fault(sandbox.sandbox, node, a, clear=True)
