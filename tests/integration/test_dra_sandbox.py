"""``gpuAllocation: dra`` on the real control plane: the fake probes publish ResourceSlices the way NVIDIA's DRA
driver does, the operator creates one ResourceClaim per rank pinned to the planned GPUs by UUID, and the real
kube-scheduler allocates them. Nothing here is mocked. The module brings up its own sandbox
(``--gpu-allocation dra``, four HGX H100 nodes)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from own_sandbox import own_sandbox

from gputopo.sandbox.faults import gpu_fault
from gputopo.sandbox.harness import Jobs, training_job
from gputopo.sandbox.testing import SandboxHandle

pytestmark = pytest.mark.integration

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test") + "-dra"
NS = "dra-test"
OTHER = "dra-other"
NODES = 4
TIMEOUT = 60.0
FAST = {"backoffSeconds": 0, "gracePeriodSeconds": 0, "cooldownSeconds": 0}


box, operator, jobs = own_sandbox(
    NAME,
    NS,
    OTHER,
    {"GPUTOPO_GPU_ALLOCATION": "dra", "GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "60"},
    nodes=NODES,
    profile="hgx-h100",
    gpu_allocation="dra",
)


# -- reading the cluster --------------------------------------------------------------------------------------------


def uuids_by_index(box: SandboxHandle, node: str) -> dict[int, str]:
    return {g["index"]: g["uuid"] for g in box.get_json("nodetopology", node)["status"]["gpus"]}


def slice_devices(box: SandboxHandle) -> dict[tuple[str, str], str]:
    """(pool, device name) -> uuid, from every gpu.nvidia.com ResourceSlice."""
    found = {}
    for item in box.get_json("resourceslices")["items"]:
        spec = item["spec"]
        if spec["driver"] != "gpu.nvidia.com":
            continue
        for device in spec.get("devices") or []:
            found[(spec["pool"]["name"], device["name"])] = device["attributes"]["uuid"]["string"]
    return found


def claims(box: SandboxHandle, namespace: str = NS, job: str | None = None) -> list[dict[str, Any]]:
    selector = ["-l", f"gputopo.io/job={job}"] if job else []
    items: list[dict[str, Any]] = box.get_json("resourceclaims", "-n", namespace, *selector)["items"]
    return items


def claim_names(box: SandboxHandle, job: str) -> list[str]:
    return sorted(c["metadata"]["name"] for c in claims(box, job=job))


def allocated(claim: dict[str, Any]) -> list[tuple[str, str]]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [(r["pool"], r["device"]) for r in results if r["driver"] == "gpu.nvidia.com"]


def assert_allocation_is_the_plan(box: SandboxHandle, jobs: Jobs, name: str) -> list[tuple[str, str]]:
    """Every rank's claim holds exactly its planned GPUs, on its planned node, reserved for its pod."""
    placement = jobs.status(name)["placement"]
    devices = slice_devices(box)
    by_name = {c["metadata"]["name"]: c for c in claims(box, job=name)}
    pods = {p["metadata"]["name"]: p for p in jobs.pods(name)}
    taken = []
    for worker in placement["workers"]:
        claim = by_name[f"{name}-{worker['rank']}-g{placement['generation']}"]
        held = allocated(claim)
        uuids = uuids_by_index(box, worker["node"])
        assert {devices[d] for d in held} == {uuids[g] for g in worker["gpus"]}, (name, worker)
        assert {pool for pool, _ in held} == {worker["node"]}
        pod = pods[f"{name}-{worker['rank']}"]
        assert pod["spec"]["nodeName"] == worker["node"]
        assert [r["name"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["name"]]
        assert "nvidia.com/gpu" not in (pod["spec"]["containers"][0]["resources"].get("limits") or {})
        taken += held
    return taken


def running(jobs: Jobs, name: str, workers: int) -> None:
    jobs.wait_phase(name, "Running", timeout=TIMEOUT)
    jobs.wait_running_pods(name, workers, timeout=TIMEOUT)


# -- the tests --------------------------------------------------------------------------------------------------------


def test_every_node_publishes_its_gpus_as_nvidias_driver_does(box: SandboxHandle) -> None:
    def every_node() -> dict[tuple[str, str], str] | None:
        devices = slice_devices(box)
        return devices if {pool for pool, _ in devices} == set(box.nodes) else None

    devices = box.wait_for("a slice per node", every_node)
    for node in box.nodes:
        uuids = uuids_by_index(box, node)
        assert {devices[(node, f"gpu-{i}")] for i in range(8)} == set(uuids.values())
    classes = box.get_json("deviceclass", "gpu.nvidia.com")
    assert "gpu.nvidia.com" in classes["spec"]["selectors"][0]["cel"]["expression"]


def test_the_schedulers_allocation_equals_the_plan_for_every_rank(box: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("pair", NS, workers=2, gpusPerWorker=4, topology={"intraNode": "nvlink"}))
    running(jobs, "pair", 2)
    assert len(assert_allocation_is_the_plan(box, jobs, "pair")) == 8


def test_two_gangs_never_share_a_device(box: SandboxHandle, jobs: Jobs) -> None:
    names = [f"g{i}" for i in range(6)]
    for name in names:
        jobs.apply(training_job(name, NS, workers=1, gpusPerWorker=4))
    for name in names:
        running(jobs, name, 1)
    taken = [d for name in names for d in assert_allocation_is_the_plan(box, jobs, name)]
    assert len(taken) == 24 and len(set(taken)) == 24


def test_deleting_the_job_leaves_no_claim(box: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("short", NS, workers=1, gpusPerWorker=2))
    running(jobs, "short", 1)
    assert claim_names(box, "short") == ["short-0-g1"]
    jobs.delete("short")
    box.wait_for("the claims to go with the job", lambda: not claim_names(box, "short"), timeout=TIMEOUT)


def test_re_placement_releases_the_old_claims_and_withdraws_the_faulty_device(box: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("mover", NS, workers=1, gpusPerWorker=2, failurePolicy={**FAST, "maxRestarts": 3}))
    running(jobs, "mover", 1)
    first = jobs.status("mover")["placement"]
    node, gpu = first["workers"][0]["node"], first["workers"][0]["gpus"][0]
    gpu_fault(box.sandbox, node, gpu, xid=79)
    try:
        box.wait_for("the faulty GPU's device withdrawn", lambda: (node, f"gpu-{gpu}") not in slice_devices(box))
        jobs.wait(
            "a new placement", lambda: jobs.status("mover").get("placement", {}).get("generation", 0) > 1, TIMEOUT
        )
        running(jobs, "mover", 1)
        generation = jobs.status("mover")["placement"]["generation"]
        box.wait_for(
            "only the new generation's claim",
            lambda: claim_names(box, "mover") == [f"mover-0-g{generation}"],
            timeout=TIMEOUT,
        )
        held = assert_allocation_is_the_plan(box, jobs, "mover")
        assert (node, f"gpu-{gpu}") not in held
    finally:
        gpu_fault(box.sandbox, node, gpu, clear=True)


def test_a_rank_whose_planned_device_was_taken_is_planned_again(box: SandboxHandle, jobs: Jobs) -> None:
    # Pods for a scheduler nobody runs stay unbound: the plan and its claims exist, nothing is allocated.
    held_back = {"spec": {"schedulerName": "nobody", "containers": [{"name": "t", "image": "pytorch"}]}}
    jobs.apply(training_job("held", NS, workers=2, gpusPerWorker=8, template=held_back))
    jobs.wait("both claims", lambda: len(claim_names(box, "held")) == 2, TIMEOUT)
    plan = jobs.status("held")["placement"]
    victim = plan["workers"][1]
    # The next plan's pods go to kube-scheduler.
    jobs.apply(training_job("held", NS, workers=2, gpusPerWorker=8))
    uuid = uuids_by_index(box, victim["node"])[victim["gpus"][0]]
    # Another workload takes one of rank 1's planned GPUs through its own claim.
    box.kubectl("create", "namespace", OTHER, check=False)
    other_claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "thief", "namespace": OTHER},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'}}]}}]}},
    }  # fmt: skip
    other_pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thief", "namespace": OTHER},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "thief"}],
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}]},
    }  # fmt: skip
    box.kubectl("apply", "-f", "-", input=json.dumps(other_claim))
    box.kubectl("apply", "-f", "-", input=json.dumps(other_pod))
    box.wait_for("the other workload's claim allocated", lambda: allocated(claims(box, OTHER)[0]), timeout=TIMEOUT)

    event = jobs.wait(
        "the job sent back to planning",
        lambda: next((e for e in jobs.events("held") if e["reason"] == "ClaimUnallocatable"), None),
        TIMEOUT,
    )
    assert f"GPU {victim['gpus'][0]} of {victim['node']} (rank 1)" in event["message"]
    assert f"ResourceClaim {OTHER}/thief" in event["message"]
    running(jobs, "held", 2)
    assert jobs.status("held")["placement"]["generation"] == plan["generation"] + 1
    held = assert_allocation_is_the_plan(box, jobs, "held")
    thief = allocated(claims(box, OTHER)[0])
    assert not set(held) & set(thief)
