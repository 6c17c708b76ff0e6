"""The I/O around gangs gputopo places without owning them, against the real API server: steering a gated pod with a
JSON patch, evicting through the Eviction API, GangPlacement records, and the gang watches (trimmed objects, APIs
not served, an API installed later)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from client_calls import run as run_client
from stand_in_crds import crd

from gputopo.control.gangactions import ClaimAllocation
from gputopo.control.gangdra import claim_patches
from gputopo.controller.gangwatches import GangWatches
from gputopo.gangs.model import GangId
from gputopo.gangs.steer import steer_patch
from gputopo.kube.client import KubeClient, load_configuration
from gputopo.kube.errors import ApiError
from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-gang-io-it"
GATE = "gputopo.io/placement"
KUEUE_GATE = "kueue.x-k8s.io/admission"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
T = TypeVar("T")


JOBSET_CRD = crd("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")


def run(sandbox: SandboxHandle, call: Callable[[KubeClient], Awaitable[T]]) -> T:
    return run_client(sandbox, call, timeout=30)


def install(sandbox: SandboxHandle, definition: dict[str, Any]) -> None:
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(definition))
    name = definition["metadata"]["name"]
    sandbox.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=20s")


@pytest.fixture(scope="module")
def namespace(sandbox: SandboxHandle) -> Iterator[str]:
    # The sandbox installs gputopo's own CRDs, GangPlacement among them.
    sandbox.kubectl("create", "namespace", NS, check=False)
    yield NS
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def a_pod(name: str, *, gates: tuple[str, ...] = (), node: str | None = None, app: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox"}],
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node:
        spec["nodeName"] = node
    labels = {"app": app} if app else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    }


def create(sandbox: SandboxHandle, body: dict[str, Any]) -> dict[str, Any]:
    sandbox.kubectl("delete", "pod", "-n", NS, body["metadata"]["name"], "--grace-period=0", "--force", check=False)
    sandbox.kubectl("create", "-f", "-", input=json.dumps(body))
    return get_pod(sandbox, body["metadata"]["name"])


def get_pod(sandbox: SandboxHandle, name: str) -> dict[str, Any]:
    return sandbox.get_json("pod", "-n", NS, name)  # type: ignore[no-any-return]


def steer_ops(pod: dict[str, Any], node: str, gate_index: int) -> list[dict[str, Any]]:
    """The operator's steering: pin to ``node``, annotate, lift gputopo's gate after testing its index and the uid."""
    gate_path = f"/spec/schedulingGates/{gate_index}"
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return [
        {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
        {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}},
        {"op": "add", "path": "/metadata/annotations", "value": {"gputopo.io/gpus": "0,1", "gputopo.io/gang": "g"}},
        {"op": "test", "path": gate_path, "value": {"name": GATE}},
        {"op": "remove", "path": gate_path},
    ]


def test_a_gated_pod_is_steered_and_a_stale_patch_changes_nothing(sandbox: SandboxHandle, namespace: str) -> None:
    node = sandbox.nodes[0]
    pod = create(sandbox, a_pod("steer-me", gates=(KUEUE_GATE, GATE)))
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "steer-me", steer_ops(pod, node, 1))) is True

    steered = get_pod(sandbox, "steer-me")
    assert steered["spec"]["schedulingGates"] == [{"name": KUEUE_GATE}]  # Kueue's gate stays
    terms = steered["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    assert steered["metadata"]["annotations"]["gputopo.io/gang"] == "g"

    # The same patch again: its gate test fails (the gate is gone), so nothing of it is applied.
    again = [op for op in steer_ops(pod, node, 1) if op["path"] != "/spec/affinity"]
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "steer-me", again)) is False
    # A patch for a pod of the same name but another uid: refused.
    other = {**pod, "metadata": {**pod["metadata"], "uid": "00000000-0000-0000-0000-000000000000"}}
    recreated = [steer_ops(other, node, 0)[0], {"op": "remove", "path": "/spec/schedulingGates/0"}]
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "steer-me", recreated)) is False
    after = get_pod(sandbox, "steer-me")
    assert after["metadata"]["resourceVersion"] == steered["metadata"]["resourceVersion"]

    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "no-such-pod", again)) is False


def test_a_pod_annotated_meanwhile_keeps_its_annotations_and_a_pod_without_any_gets_them(
    sandbox: SandboxHandle, namespace: str
) -> None:
    """The steering patch of a pod read without annotations adds the whole map: applied to a pod that another
    controller annotated since, it must fail (the next pass reads the pod again) rather than replace the map."""
    node = sandbox.nodes[0]
    gang = GangId(namespace, "podgroup", "annotated")
    pod = create(sandbox, a_pod("annotated-meanwhile", gates=(GATE,)))
    assert "annotations" not in pod["metadata"]
    patch = steer_patch(pod, node, (0, 1), 1, gang)
    sandbox.kubectl("annotate", "pod", "-n", namespace, "annotated-meanwhile", "example.com/team=vision")
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "annotated-meanwhile", patch)) is False
    after = get_pod(sandbox, "annotated-meanwhile")
    assert after["metadata"]["annotations"] == {"example.com/team": "vision"}
    assert after["spec"]["schedulingGates"] == [{"name": GATE}]

    # Read again, the pod is steered and keeps the other controller's annotation.
    again = steer_patch(after, node, (0, 1), 1, gang)
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "annotated-meanwhile", again)) is True
    steered = get_pod(sandbox, "annotated-meanwhile")
    assert steered["metadata"]["annotations"]["example.com/team"] == "vision"
    assert steered["metadata"]["annotations"]["gputopo.io/gpus"] == "0,1"

    # A pod with no annotations at all, unchanged since it was read: steered, the map added whole.
    bare = create(sandbox, a_pod("never-annotated", gates=(GATE,)))
    patch = steer_patch(bare, node, (2,), 1, gang)
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "never-annotated", patch)) is True
    assert get_pod(sandbox, "never-annotated")["metadata"]["annotations"]["gputopo.io/gpus"] == "2"


def test_a_claim_given_a_finalizer_meanwhile_keeps_it(sandbox: SandboxHandle, namespace: str) -> None:
    """The claim's first finalizer goes in as a whole list after a test that there is still none: a finalizer
    another controller put on the claim since it was read fails the patch instead of being replaced."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "finalized-meanwhile", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    sandbox.kubectl("delete", "resourceclaim", "-n", namespace, "finalized-meanwhile", "--wait=false", check=False)
    sandbox.kubectl("create", "-f", "-", input=json.dumps(claim))
    read = sandbox.get_json("resourceclaim", "-n", namespace, "finalized-meanwhile")
    assert not read["metadata"].get("finalizers")
    write = ClaimAllocation("finalized-meanwhile", read["metadata"]["uid"], "p0", {}, finalizers=())
    finalize = claim_patches(write)[0][1]
    other = {"metadata": {"finalizers": ["example.com/keep"]}}
    sandbox.kubectl(
        "patch", "resourceclaim", "-n", namespace, "finalized-meanwhile", "--type=merge", "-p", json.dumps(other)
    )
    assert run(sandbox, lambda c: c.patch_claim_json(namespace, "finalized-meanwhile", finalize)) is False
    after = sandbox.get_json("resourceclaim", "-n", namespace, "finalized-meanwhile")
    assert after["metadata"]["finalizers"] == ["example.com/keep"]

    # Read again, the finalizer is appended beside the other one.
    again = claim_patches(replace(write, finalizers=("example.com/keep",)))[0][1]
    assert run(sandbox, lambda c: c.patch_claim_json(namespace, "finalized-meanwhile", again)) is True
    kept = sandbox.get_json("resourceclaim", "-n", namespace, "finalized-meanwhile")["metadata"]["finalizers"]
    assert kept == ["example.com/keep", "resource.kubernetes.io/delete-protection"]
    sandbox.kubectl(
        "patch",
        "resourceclaim",
        "-n",
        namespace,
        "finalized-meanwhile",
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": None}}),
    )


def test_a_bound_pod_refuses_steering_cleanly(sandbox: SandboxHandle, namespace: str) -> None:
    node = sandbox.nodes[1]
    pod = create(sandbox, a_pod("bound", node=node))
    # Its gate is not there to test: refused, nothing applied.
    assert run(sandbox, lambda c: c.patch_pod_json(namespace, "bound", steer_ops(pod, node, 0))) is False
    # Without a test, the API server refuses to change a bound pod's affinity: an error in the operator's words.
    pin = steer_ops(pod, node, 0)[1:2]
    with pytest.raises(ApiError) as refused:
        run(sandbox, lambda c: c.patch_pod_json(namespace, "bound", pin))
    assert refused.value.status == 422 and refused.value.reason == "Invalid"
    after = get_pod(sandbox, "bound")
    assert after["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
    assert "affinity" not in after["spec"]


def test_eviction_honours_a_disruption_budget(sandbox: SandboxHandle, namespace: str) -> None:
    create(sandbox, a_pod("evict-me", node=sandbox.nodes[2], app="evict-me"))
    sandbox.wait_for("the pod runs", lambda: get_pod(sandbox, "evict-me").get("status", {}).get("phase") == "Running")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "evict-me"}}},
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(budget))

    def budget_observed() -> bool:
        status = sandbox.get_json("pdb", "-n", namespace, "keep-one").get("status", {})
        return bool(status.get("observedGeneration", 0) >= 1 and status.get("currentHealthy") == 1)

    sandbox.wait_for("the budget is observed", budget_observed, timeout=20)
    assert run(sandbox, lambda c: c.evict_pod(namespace, "evict-me", 0)) == "blocked"
    assert get_pod(sandbox, "evict-me")["metadata"].get("deletionTimestamp") is None

    sandbox.kubectl("delete", "pdb", "-n", namespace, "keep-one")
    uid = get_pod(sandbox, "evict-me")["metadata"]["uid"]
    assert run(sandbox, lambda c: c.evict_pod(namespace, "evict-me", 0, uid="not-" + uid)) == "gone"
    assert run(sandbox, lambda c: c.evict_pod(namespace, "evict-me", 0, uid=uid)) == "evicted"
    sandbox.wait_for("the pod is gone", lambda: "evict-me" not in sandbox.kubectl("get", "pods", "-n", namespace))
    assert run(sandbox, lambda c: c.evict_pod(namespace, "evict-me", None)) == "gone"


def test_a_gang_placement_record_is_created_once_and_its_status_written_whole(
    sandbox: SandboxHandle, namespace: str
) -> None:
    body = {"metadata": {"name": "jobset-js", "namespace": namespace}, "spec": {"source": "jobset", "gang": "js"}}
    assert run(sandbox, lambda c: c.create_gang_placement(body)) is True
    assert run(sandbox, lambda c: c.create_gang_placement(body)) is False
    first = {"generation": 1, "nodes": ["a", "b", "c"], "nodeCount": 3, "message": "placed"}
    run(sandbox, lambda c: c.write_gang_placement_status(namespace, "jobset-js", first))
    second = {"generation": 2, "nodes": ["d"], "nodeCount": 1, "message": None}
    version = run(sandbox, lambda c: c.write_gang_placement_status(namespace, "jobset-js", second))
    stored = sandbox.get_json("gangplacements.gputopo.io", "-n", namespace, "jobset-js")
    assert stored["status"] == {"generation": 2, "nodes": ["d"], "nodeCount": 1}  # list replaced, None removed
    assert stored["metadata"]["resourceVersion"] == version
    assert stored["spec"] == {"source": "jobset", "gang": "js"}
    run(sandbox, lambda c: c.delete_gang_placement(namespace, "jobset-js"))
    run(sandbox, lambda c: c.delete_gang_placement(namespace, "jobset-js"))  # gone already: no error


def test_a_gang_placement_is_deleted_only_as_it_was_read(sandbox: SandboxHandle, namespace: str) -> None:
    body = {"metadata": {"name": "gputopo-bare", "namespace": namespace}, "spec": {"source": "gputopo", "gang": "bare"}}

    def read() -> tuple[str, str]:
        meta = sandbox.get_json("gangplacements.gputopo.io", "-n", namespace, "gputopo-bare")["metadata"]
        return meta["uid"], meta["resourceVersion"]

    assert run(sandbox, lambda c: c.create_gang_placement(body)) is True
    uid, version = read()
    run(sandbox, lambda c: c.write_gang_placement_status(namespace, "gputopo-bare", {"phase": "Released"}))
    # written since it was read: kept
    stale = run(
        sandbox, lambda c: c.delete_gang_placement(namespace, "gputopo-bare", uid=uid, resource_version=version)
    )
    assert stale == "changed" and read()[0] == uid
    # another record made under the same name: kept
    run(sandbox, lambda c: c.delete_gang_placement(namespace, "gputopo-bare"))
    assert run(sandbox, lambda c: c.create_gang_placement(body)) is True
    again, version = read()
    assert again != uid
    assert run(sandbox, lambda c: c.delete_gang_placement(namespace, "gputopo-bare", uid=uid)) == "changed"
    assert read()[0] == again
    # the very record read: deleted; then there is none
    deleted = run(
        sandbox, lambda c: c.delete_gang_placement(namespace, "gputopo-bare", uid=again, resource_version=version)
    )
    assert deleted == "deleted"
    assert not sandbox.kubectl("get", "gangplacements.gputopo.io", "-n", namespace, "--ignore-not-found").strip()
    assert run(sandbox, lambda c: c.delete_gang_placement(namespace, "gputopo-bare", uid=again)) == "gone"


async def until(what: str, ok: Callable[[], bool], timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if ok():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


def an_indexed_job(name: str, mode: str) -> dict[str, Any]:
    template = a_pod("x", gates=(GATE,))
    template["spec"].pop("terminationGracePeriodSeconds")
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": mode,
            "template": {"metadata": {"annotations": {"gputopo.io/intra-node": "nvswitch"}}, "spec": template["spec"]},
        },
    }


def test_the_gang_watches_see_a_jobs_gated_pods_trimmed(sandbox: SandboxHandle, namespace: str) -> None:
    create(sandbox, a_pod("not-a-candidate"))

    async def go() -> None:
        client = KubeClient(load_configuration(str(sandbox.kubeconfig)), concurrency=8)
        pokes: list[int] = []
        try:
            async with GangWatches(client, lambda: pokes.append(1), recheck_seconds=600) as watches:
                assert watches.served("gangplacements") and not watches.served("pytorchjobs")
                assert watches.served("podgroups")  # the sandbox's 1.37 serves scheduling.k8s.io/v1beta1
                assert len(watches.pytorch_jobs) == 0 and len(watches.pod_groups) == 0
                for name, mode in (("indexed", "Indexed"), ("plain", "NonIndexed")):
                    body = json.dumps(an_indexed_job(name, mode))
                    await asyncio.to_thread(sandbox.kubectl, "create", "-f", "-", input=body)

                def pods_of(job: str) -> list[tuple[str, str]]:
                    return [k for k in watches.pods if k[1].startswith(f"{job}-")]

                await until("the Indexed Job's gated pods are seen", lambda: len(pods_of("indexed")) == 2)
                await until("the other Job's gated pods are seen", lambda: len(pods_of("plain")) == 2)
                assert (namespace, "indexed") in watches.jobs and (namespace, "plain") not in watches.jobs
                assert (namespace, "not-a-candidate") not in watches.pods
                job = watches.jobs[namespace, "indexed"]
                assert set(job) == {"metadata", "spec"} and "resourceVersion" not in job["metadata"]
                assert job["spec"]["template"]["metadata"]["annotations"] == {"gputopo.io/intra-node": "nvswitch"}
                assert set(job["spec"]["template"]["spec"]["containers"][0]) == {"name", "resources"}
                pod = watches.pods[pods_of("indexed")[0]]
                # the phase, and kube-scheduler's PodScheduled condition when it has written one: nothing else
                assert pod["status"]["phase"] == "Pending"
                assert all(c["type"] == "PodScheduled" for c in pod["status"].get("conditions", []))
                assert "managedFields" not in pod["metadata"] and "volumes" not in pod["spec"]
                assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
                assert pokes

                # A pod whose gate is lifted, not annotated as steered, stops being a candidate.
                lifted = pods_of("plain")[0][1]
                remove = '[{"op":"remove","path":"/spec/schedulingGates/0"}]'
                await asyncio.to_thread(
                    sandbox.kubectl, "patch", "pod", "-n", namespace, lifted, "--type=json", "-p", remove
                )
                await until("the lifted pod is let go", lambda: (namespace, lifted) not in watches.pods)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(go(), 30))


def test_an_api_installed_later_is_watched_and_one_removed_is_let_go(sandbox: SandboxHandle, namespace: str) -> None:
    sandbox.kubectl("delete", "crd", JOBSET_CRD["metadata"]["name"], "--ignore-not-found", "--wait=true")
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": namespace},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4}}}]},
    }

    async def go() -> None:
        client = KubeClient(load_configuration(str(sandbox.kubeconfig)), concurrency=8)
        try:
            async with GangWatches(client, lambda: None, recheck_seconds=0.5) as watches:
                assert not watches.served("jobsets") and len(watches.job_sets) == 0
                await asyncio.to_thread(install, sandbox, JOBSET_CRD)
                await until("JobSets are watched once served", lambda: watches.served("jobsets"))
                await asyncio.to_thread(sandbox.kubectl, "create", "-f", "-", input=json.dumps(jobset))
                await until("the JobSet is seen", lambda: (namespace, "js") in watches.job_sets)
                assert watches.job_sets[namespace, "js"]["spec"]["replicatedJobs"][0]["replicas"] == 2
                await asyncio.to_thread(sandbox.kubectl, "delete", "crd", JOBSET_CRD["metadata"]["name"])
                await until("JobSets are let go once not served", lambda: not watches.served("jobsets"))
                assert len(watches.job_sets) == 0
        finally:
            await client.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 30))
    finally:
        sandbox.kubectl("delete", "crd", JOBSET_CRD["metadata"]["name"], "--ignore-not-found", "--wait=false")


def test_write_gang_records_steers_and_tells_the_owner(sandbox: SandboxHandle, namespace: str) -> None:
    from gputopo.control.facts import JobKey
    from gputopo.control.gangactions import GangActions, Involved, PodPatch
    from gputopo.controller.gangwriter import GangWritten, write_gang

    node = sandbox.nodes[3]
    pod = create(sandbox, a_pod("gang-0", gates=(KUEUE_GATE, GATE)))
    ops = tuple(op for op in steer_ops(pod, node, 1) if op["path"] != "/metadata/uid")  # the writer adds the uid test
    actions = GangActions(
        key=JobKey((namespace, "gputopo/g")),
        namespace=namespace,
        record_name="gputopo-g",
        record={"spec": {"source": "gputopo", "gang": "g"}},
        status={"generation": 1, "nodes": [node], "nodeCount": 1},
        patches=[PodPatch("gang-0", pod["metadata"]["uid"], ops), PodPatch("gang-1", "u", ops)],
        placed=True,
    )
    owner = Involved("v1", "Pod", "gang-0", pod["metadata"]["uid"])
    actions.event(owner, "Normal", "GangPlaced", f"placed on {node}")
    written = run(sandbox, lambda c: write_gang(c, actions))
    assert written == GangWritten(status_written=True, patched=("gang-0",), patch_failed=("gang-1",))
    record = sandbox.get_json("gangplacements.gputopo.io", "-n", namespace, "gputopo-g")
    assert record["status"] == {"generation": 1, "nodes": [node], "nodeCount": 1}
    assert get_pod(sandbox, "gang-0")["spec"]["schedulingGates"] == [{"name": KUEUE_GATE}]

    def posted() -> list[dict[str, Any]]:
        events = sandbox.get_json("events", "-n", namespace, "--field-selector", "reason=GangPlaced")["items"]
        return [e for e in events if e["involvedObject"]["name"] == "gang-0"]

    event = sandbox.wait_for("the Event is posted", posted, timeout=10)[0]
    assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["uid"] == pod["metadata"]["uid"]
