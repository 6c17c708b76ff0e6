"""``gpuAllocation: dra`` on the real control plane: the fake probes publish ResourceSlices the way NVIDIA's DRA
driver does, the operator creates one ResourceClaim per rank pinned to the planned GPUs by UUID, and the real
kube-scheduler allocates them. A foreign gang's pods bring claims of their own (from a ResourceClaimTemplate): the
operator writes their allocation, the planned devices, before it lifts the gate, and kube-scheduler honours it.
Nothing here is mocked. The module brings up its own sandbox
(``--gpu-allocation dra``, four HGX H100 nodes)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from own_sandbox import own_sandbox

from gputopo.api.group import FIELD_MANAGER_OPERATOR
from gputopo.sandbox.faults import gpu_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, training_job
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


# -- a foreign gang's own claims --------------------------------------------------------------------------------------

GATE = "gputopo.io/placement"


def claim_template(name: str, gpus: int, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": gpus}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}},
    }


def gang_pod(name: str, gang: str, size: int, rank: int, template: str) -> dict[str, Any]:
    """A bare pod of gputopo's pod contract, gated as the chart's admission policy gates it, whose GPUs come
    from a claim made from ``template``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"gputopo.io/gang": gang, "gputopo.io/gang-size": str(size), "gputopo.io/rank": str(rank)},
        },
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "trainer", "image": "pytorch", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }


def gang_record(box: SandboxHandle, name: str) -> dict[str, Any]:
    out = box.kubectl("get", "gangplacement", name, "-n", NS, "-o", "json", check=False)
    return json.loads(out) if out.strip().startswith("{") else {}


def running_gang(box: SandboxHandle, jobs: Jobs, operator: OperatorProcess, name: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        record = gang_record(box, name)
        return record if (record.get("status") or {}).get("phase") == "Running" else None

    try:
        found: dict[str, Any] = jobs.wait(f"gang {name} Running", running, TIMEOUT)
    except AssertionError:
        print(json.dumps(gang_record(box, name).get("status"), indent=1))
        print(box.kubectl("get", "pods,resourceclaims", "-n", NS, "-o", "wide", check=False))
        print(operator.log_tail(80))
        raise
    return found


def pod_claim(box: SandboxHandle, pod: dict[str, Any]) -> dict[str, Any]:
    """The claim kube-controller-manager made from the pod's template (named in the pod's status)."""
    statuses = pod["status"].get("resourceClaimStatuses") or []
    name = next(s["resourceClaimName"] for s in statuses if s["name"] == "gpus")
    found: dict[str, Any] = box.get_json("resourceclaim", name, "-n", NS, "--show-managed-fields")
    return found


def allocation_writers(claim: dict[str, Any]) -> set[str]:
    """The field managers that own ``status.allocation`` (kube-scheduler's is "kube-scheduler")."""
    return {
        str(f.get("manager"))
        for f in claim["metadata"].get("managedFields") or []
        if f.get("subresource") == "status" and "f:allocation" in (f.get("fieldsV1") or {}).get("f:status", {})
    }


def test_a_foreign_gangs_own_claims_are_allocated_its_planned_gpus_before_it_is_let_go(
    box: SandboxHandle, jobs: Jobs, operator: OperatorProcess
) -> None:
    box.kubectl("apply", "-f", "-", input=json.dumps(claim_template("two-gpus", 2)))
    try:
        for rank in range(2):
            box.kubectl("create", "-f", "-", input=json.dumps(gang_pod(f"dg-{rank}", "dg", 2, rank, "two-gpus")))
        record = running_gang(box, jobs, operator, "gputopo-dg")
        devices = slice_devices(box)
        pods = {p["metadata"]["name"]: p for p in jobs.all_pods()}
        taken = []
        for rank in record["status"]["ranks"]:
            pod = pods[rank["pod"]]
            assert pod["spec"]["nodeName"] == rank["node"]
            assert not pod["spec"].get("schedulingGates")
            claim = pod_claim(box, pod)
            held = allocated(claim)
            uuids = uuids_by_index(box, rank["node"])
            assert {devices[d] for d in held} == {uuids[g] for g in rank["gpus"]}, (rank, held)
            assert {pool for pool, _ in held} == {rank["node"]}
            assert [r["name"] for r in claim["status"]["reservedFor"]] == [rank["pod"]]
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
            assert allocation_writers(claim) == {FIELD_MANAGER_OPERATOR}, claim["metadata"].get("managedFields")
            taken += held
        assert len(taken) == 4 and len(set(taken)) == 4
        print("planned:", [(r["rank"], r["node"], r["gpus"]) for r in record["status"]["ranks"]])
    finally:
        box.kubectl("delete", "resourceclaimtemplate", "two-gpus", "-n", NS, "--wait=false", check=False)


def test_a_claim_only_kube_scheduler_can_allocate_goes_to_its_planned_node_and_is_said_to(
    box: SandboxHandle, jobs: Jobs, operator: OperatorProcess
) -> None:
    any_gpu = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
    box.kubectl("apply", "-f", "-", input=json.dumps(claim_template("cel-gpus", 2, any_gpu)))
    try:
        box.kubectl("create", "-f", "-", input=json.dumps(gang_pod("cel-0", "cel", 1, 0, "cel-gpus")))
        record = running_gang(box, jobs, operator, "gputopo-cel")
        rank = record["status"]["ranks"][0]
        pod = next(p for p in jobs.all_pods() if p["metadata"]["name"] == "cel-0")
        assert pod["spec"]["nodeName"] == rank["node"]
        claim = pod_claim(box, pod)
        assert {pool for pool, _ in allocated(claim)} == {rank["node"]}
        assert FIELD_MANAGER_OPERATOR not in allocation_writers(claim), allocation_writers(claim)
        reasons = {e["reason"]: e["message"] for e in jobs.events("cel-0")}
        assert "CEL selectors" in reasons["GangClaimNotPinned"]
    finally:
        box.kubectl("delete", "resourceclaimtemplate", "cel-gpus", "-n", NS, "--wait=false", check=False)
