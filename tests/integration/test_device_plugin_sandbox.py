"""``gpuAllocation: devicePlugin`` on the real control plane, with the fake probes giving each pod the GPUs
NVIDIA's device plugin would (``--fake-allocation device-plugin``: its best-effort policy on the node's free
GPUs, the plan ignored) and reporting them as the kubelet's PodResources API does. The operator plans with its
model of that choice, so what the probes report is what the status says; when a pod outside gputopo takes the
planned GPUs between planning and binding, the status follows the pods and the job says so. The module brings
up its own sandbox (16 nodes of the mixed profile). Nothing here is mocked."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from own_sandbox import own_sandbox

from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.sandbox.harness import Jobs, training_job
from gputopo.sandbox.testing import SandboxHandle
from gputopo.topology.convert import from_status
from gputopo.topology.device_plugin import kubelet_choice

pytestmark = pytest.mark.integration

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test") + "-dp"
NS = "dp-test"
OTHER = "dp-other"
NODES = 16
TIMEOUT = 120.0  # a report from the binding's second is believed at the probe's next publication (heartbeat 60 s)


box, operator, jobs = own_sandbox(
    NAME,
    NS,
    OTHER,
    {"GPUTOPO_GPU_ALLOCATION": "devicePlugin", "GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "300"},
    nodes=NODES,
    profile="mixed",
    fake_allocation="device-plugin",
)


def reported(box: SandboxHandle) -> dict[tuple[str, str], tuple[str, list[int]]]:
    """(namespace, pod) -> (node, GPUs) as every node's probe reports them (NodePodGpus ``status.pods``)."""
    out = {}
    for item in box.get_json("nodepodgpus")["items"]:
        for pod in (item.get("status") or {}).get("pods") or []:
            out[(pod["namespace"], pod["name"])] = (item["metadata"]["name"], sorted(pod["gpus"]))
    return out


def gpus_as_planned(jobs: Jobs, name: str) -> dict[str, Any] | None:
    return jobs.condition(name, "GpusAsPlanned")


@contextmanager
def scheduler_paused(box: SandboxHandle) -> Iterator[None]:
    """Stop the sandbox's kube-scheduler (SIGSTOP, so its supervisor sees it alive) and resume it after."""
    pid = int((box.sandbox.cluster_dir / "pids" / "kube-scheduler.pid").read_text().strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


JOBS = [
    ("v100-pair", {"gpusPerWorker": 2, "gpu": {"model": "V100"}}),
    ("v100-three", {"gpusPerWorker": 3, "gpu": {"model": "V100"}}),
    ("nvl-four", {"gpusPerWorker": 4, "gpu": {"model": "H100 NVL"}}),
    ("l40s-three", {"gpusPerWorker": 3, "gpu": {"model": "L40S"}}),
    ("a100-two-nodes", {"workers": 2, "gpusPerWorker": 8, "gpu": {"model": "A100"}}),
]


def test_every_rank_holds_the_gpus_its_status_names(box: SandboxHandle, jobs: Jobs) -> None:
    """Jobs of 2, 3, 4 and 2x8 GPUs on DGX-1 V100, H100 NVL, L40S and A100 nodes: what the probes report for
    every rank is the status's node and GPUs, GpusAsPlanned turns True, and nothing differed on the way. One
    job at a time: the kubelet serves pods in the order they bind, which two jobs on one node need not keep."""
    for name, spec in JOBS:
        jobs.apply(training_job(name, NS, **spec))
        jobs.wait_phase(name, "Running", timeout=TIMEOUT)
        condition = jobs.wait(
            f"{name}'s GPUs reported",
            lambda n=name: (c := gpus_as_planned(jobs, n)) and c["status"] != "Unknown" and c,
            timeout=TIMEOUT,
        )
        assert condition["status"] == "True", condition
    held = reported(box)
    for name, _ in JOBS:
        for worker in jobs.status(name)["placement"]["workers"]:
            pod = f"{name}-{worker['rank']}"
            assert held[(NS, pod)] == (worker["node"], sorted(worker["gpus"])), (pod, worker)
        assert not [e for e in jobs.events(name) if e["reason"] == "GpusDiffer"]
    first = jobs.status("v100-pair")["placement"]["workers"][0]
    topology = from_status(NodeTopologyStatus.model_validate(box.get_json("nodetopology", first["node"])["status"]))
    assert tuple(first["gpus"]) == kubelet_choice(topology, range(topology.gpu_count), 2)  # first on a free DGX-1


def test_gpus_taken_outside_gputopo_before_binding_make_the_status_follow_the_pod(
    box: SandboxHandle, jobs: Jobs
) -> None:
    """Between planning and binding a pod of another namespace, bound straight to the node, takes the planned
    GPUs; the kubelet then gives the rank others. The status shows them, with GpusAsPlanned False and an Event."""
    jobs.wait(
        "no pod of the earlier tests reported", lambda: not any(ns == NS for ns, _ in reported(box)), timeout=TIMEOUT
    )
    with scheduler_paused(box):
        jobs.apply(training_job("late", NS, gpusPerWorker=2, gpu={"model": "V100"}))
        planned = jobs.wait(
            "late planned", lambda: (jobs.status("late").get("placement") or {}).get("workers"), timeout=TIMEOUT
        )[0]
        box.kubectl("create", "namespace", OTHER, check=False)
        box.kubectl("apply", "-n", OTHER, "-f", "-", input=json.dumps(_foreign_pod(planned["node"], 2)))
        jobs.wait(
            "the foreign pod holding the planned GPUs",
            lambda: reported(box).get((OTHER, "squatter")) == (planned["node"], sorted(planned["gpus"])),
            timeout=TIMEOUT,
        )
    condition = jobs.wait(
        "GpusAsPlanned False",
        lambda: (c := gpus_as_planned(jobs, "late")) and c["status"] == "False" and c,
        timeout=TIMEOUT,
    )
    assert condition["reason"] == "DevicePluginChoseOtherGpus"
    node, real = reported(box)[(NS, "late-0")]
    assert node == planned["node"] and not set(real) & set(planned["gpus"])
    assert f"rank 0 on {node} holds GPUs {real}, planned {planned['gpus']}" in condition["message"]
    worker = jobs.status("late")["placement"]["workers"][0]
    assert sorted(worker["gpus"]) == real
    assert [e for e in jobs.events("late") if e["reason"] == "GpusDiffer"]


def _foreign_pod(node: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "squatter"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }
