"""The operator's own ServiceAccount under the chart's operator-limits policy, on the sandbox's real API server:
RBAC lets it create, patch and delete pods in every namespace; the policy lets it create only a TrainingJob's pods,
never write pods in kube-system, and change a pod only the way it places one (the very patch gputopo's steering
builds passes; any other change is refused, in words that name the rule). Requests are made with
``kubectl --as`` the operator's ServiceAccount, which the policy knows by its user name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tenant_helpers import (
    LIMITS_POLICY,
    RELEASE,
    STATE_POLICY,
    TEAM_A,
    apply,
    as_operator,
    delete,
    pod,
    refused,
    release_docs,
    tenants,
)

from gputopo.api.group import LABEL_JOB
from gputopo.control.pods import owner_reference
from gputopo.gangs.model import GATE, GangId
from gputopo.gangs.steer import steer_patch
from gputopo.sandbox.harness import training_job
from gputopo.sandbox.testing import SandboxHandle

SYSTEM = "kube-system"


@pytest.fixture(scope="module")
def box(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    policies = {STATE_POLICY, LIMITS_POLICY, f"{RELEASE}-operator"}
    objects = [
        d for d in release_docs()
        if d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole",
                         "ClusterRoleBinding") and d["metadata"]["name"] in policies
    ]  # fmt: skip
    assert len(objects) == 6, [o["metadata"]["name"] for o in objects]
    with tenants(sandbox, generous=False):
        apply(sandbox, objects)
        probe = json.dumps(pod("probe"))

        def in_effect() -> bool:
            out = as_operator(sandbox, "create", "-n", TEAM_A, "--dry-run=server", "-f", "-", input=probe)
            return LIMITS_POLICY in out.stderr

        sandbox.wait_for("the operator-limits policy to take effect", in_effect, timeout=30, every=0.5)
        try:
            yield sandbox
        finally:
            sandbox.kubectl("delete", "pod", "-n", SYSTEM, "-l", "gputopo.io/tenancy-test", "--wait=false", check=False)
            delete(sandbox, objects)


def trainingjob_owner(box: SandboxHandle, name: str) -> dict[str, Any]:
    out = box.kubectl("create", "-n", TEAM_A, "-o", "json", "-f", "-", input=json.dumps(training_job(name, TEAM_A)))
    return owner_reference(name, json.loads(out)["metadata"]["uid"])


def admin_pod(box: SandboxHandle, manifest: dict[str, Any], namespace: str = TEAM_A) -> dict[str, Any]:
    """A pod created by the cluster's admin (not the operator), as a tenant's controller would."""
    out = box.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(manifest))
    return dict(json.loads(out))


def json_patch(box: SandboxHandle, name: str, ops: list[dict[str, Any]], namespace: str = TEAM_A) -> Any:
    return as_operator(box, "patch", "pod", name, "-n", namespace, "--type=json", "-p", json.dumps(ops))


# -- what the operator does: allowed -------------------------------------------------------------------------------


def test_the_operator_creates_a_trainingjobs_pod(box: SandboxHandle) -> None:
    manifest = pod("trainer-0", labels={LABEL_JOB: "trainer"}, owners=[trainingjob_owner(box, "trainer")])
    out = as_operator(box, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(manifest))
    assert out.returncode == 0, out.stderr


def test_the_operator_places_a_gated_pod_with_its_own_steering_patch(box: SandboxHandle) -> None:
    stored = admin_pod(box, pod("gang-0", labels={"gputopo.io/gang": "g"}, gates=[GATE], annotations={"team": "a"}))
    node = box.nodes[0]
    ops = steer_patch(stored, node, (0, 1), 1, GangId(TEAM_A, "gputopo", "g"))
    out = json_patch(box, "gang-0", ops)
    assert out.returncode == 0, out.stderr
    placed = box.get_json("pod", "gang-0", "-n", TEAM_A)
    assert not placed["spec"].get("schedulingGates")
    assert placed["metadata"]["annotations"]["gputopo.io/gpus"] == "0,1"
    assert placed["metadata"]["annotations"]["team"] == "a"
    terms = placed["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    pinned = {"key": "metadata.name", "operator": "In", "values": [node]}
    assert terms["nodeSelectorTerms"] == [{"matchFields": [pinned]}]


def test_the_operator_writes_trainingjob_status(box: SandboxHandle) -> None:
    trainingjob_owner(box, "with-status")
    status = {"status": {"phase": "Pending", "message": "waiting for GPUs"}}
    out = as_operator(box, "patch", "trainingjob", "with-status", "-n", TEAM_A, "--subresource=status",
                      "--type=merge", "-p", json.dumps(status))  # fmt: skip
    assert out.returncode == 0, out.stderr


# -- what it may not do ----------------------------------------------------------------------------------------


def test_the_operator_may_not_create_a_pod_no_trainingjob_controls(box: SandboxHandle) -> None:
    out = as_operator(box, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(pod("miner", labels={"app": "x"})))
    assert "creates only the pods of a TrainingJob" in refused(out, LIMITS_POLICY)


def _system_pod(box: SandboxHandle, name: str) -> dict[str, Any]:
    return admin_pod(box, pod(name, labels={"gputopo.io/tenancy-test": "1"}), SYSTEM)


def _in_kube_system(box: SandboxHandle, action: str) -> Any:
    if action == "create":
        # Even with a TrainingJob's owner reference (names are namespaced: such a pod would be collected as an orphan).
        manifest = pod("sneaky", labels={"gputopo.io/tenancy-test": "1"}, owners=[trainingjob_owner(box, "sneaky")])
        return as_operator(box, "create", "-n", SYSTEM, "-f", "-", input=json.dumps(manifest))
    name = f"system-{action}"
    _system_pod(box, name)
    if action == "delete":
        return as_operator(box, "delete", "pod", name, "-n", SYSTEM, "--wait=false")
    if action == "patch":
        return json_patch(box, name, [{"op": "add", "path": "/metadata/annotations", "value": {"gputopo.io/x": "1"}}],
                          SYSTEM)  # fmt: skip
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": SYSTEM}}
    return as_operator(box, "create", "--raw", f"/api/v1/namespaces/{SYSTEM}/pods/{name}/eviction",
                       "-f", "-", input=json.dumps(eviction))  # fmt: skip


@pytest.mark.parametrize("action", ["create", "delete", "patch", "evict"])
def test_the_operator_never_writes_pods_in_kube_system(box: SandboxHandle, action: str) -> None:
    out = _in_kube_system(box, action)
    if action == "evict":  # the raw call prints the API server's Status, not kubectl's wording
        assert out.returncode != 0 and LIMITS_POLICY in out.stderr, out.stderr
        assert "never writes pods in kube-system" in out.stderr
        return
    assert "never writes pods in kube-system" in refused(out, LIMITS_POLICY)


CHANGES = [
    ("a-label", [{"op": "add", "path": "/metadata/labels/stolen", "value": "yes"}]),
    ("another-annotation", [{"op": "add", "path": "/metadata/annotations/team", "value": "b"}]),
    ("another-gate", [{"op": "remove", "path": "/spec/schedulingGates/0"}]),
    ("a-finalizer", [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/keep"]}]),
    ("an-owner", [{"op": "add", "path": "/metadata/ownerReferences", "value": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "6a4f3d1e-0000-4000-8000-000000000001"}]}]),
    ("the-image", [{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.k8s.io/pause:3.9"}]),
    ("a-toleration", [{"op": "add", "path": "/spec/tolerations/-", "value": {"key": "x", "operator": "Exists"}}]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "ops"), CHANGES, ids=[c[0] for c in CHANGES])
def test_the_operator_changes_a_pod_only_to_place_it(box: SandboxHandle, case: str, ops: list[dict[str, Any]]) -> None:
    name = f"tenant-{case}"
    admin_pod(box, pod(name, labels={"app": "x"}, gates=["example.com/hold", GATE], annotations={"team": "a"}))
    assert "changes a pod only to place it" in refused(json_patch(box, name, ops), LIMITS_POLICY), case
