"""A tenant against the operator's state, on the sandbox's real API server with the chart's policies and roles
applied as ``helm template`` renders them: alice, the admin of one namespace whose platform also hands her every
right to gputopo's kinds there, tries each write that would steer the operator against another namespace's gangs
(a TrainingJob's status naming victims, GangPlacements, gputopo's gate, the label of a TrainingJob's pod) and is
refused by the policy, in words that name the rule; the operator's ServiceAccount and the garbage collector still
write what they must. Without the tenant roles a namespace's admin could not run a TrainingJob at all; with them it
can, and still cannot write status or GangPlacements.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tenant_helpers import (
    ALICE,
    BOB,
    CAROL,
    LIMITS_POLICY,
    RELEASE,
    STATE_POLICY,
    TEAM_A,
    TEAM_B,
    apply,
    as_operator,
    as_user,
    delete,
    kubectl_run,
    pod,
    refused,
    release_docs,
    tenants,
)

from gputopo.api.group import LABEL_JOB
from gputopo.gangs.model import GATE
from gputopo.sandbox.harness import training_job
from gputopo.sandbox.testing import SandboxHandle

OTHER_GATE = "example.com/hold"
ON_CALL = "on-call@platform"
TJ_API = "gputopo.io/v1alpha1"


def installed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The policies, the tenant roles and the operator's cluster-wide RBAC of the release."""
    policies = {STATE_POLICY, LIMITS_POLICY}
    roles = {f"{RELEASE}-operator", f"{RELEASE}-edit", f"{RELEASE}-view"}
    return [
        d for d in docs
        if (d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] in policies)
        or (d["kind"] in ("ClusterRole", "ClusterRoleBinding") and d["metadata"]["name"] in roles)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def box(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    objects = installed(release_docs())
    assert len(objects) == 8, [o["metadata"]["name"] for o in objects]
    with tenants(sandbox, generous=True):
        apply(sandbox, objects)
        # The API server loads a policy a moment after it is written; the aggregation controller fills admin.
        probe = json.dumps(pod("probe", labels={LABEL_JOB: "probe"}))

        def in_effect() -> bool:
            out = as_user(sandbox, ALICE, "create", "-n", TEAM_A, "--dry-run=server", "-f", "-", input=probe)
            return STATE_POLICY in out.stderr

        sandbox.wait_for("the operator-state policy to take effect", in_effect, timeout=30, every=0.5)
        sandbox.wait_for(
            "edit and admin to aggregate the tenant role",
            lambda: can(sandbox, CAROL, "create", "trainingjobs.gputopo.io", TEAM_B),
            timeout=30,
            every=0.5,
        )
        try:
            yield sandbox
        finally:
            delete(sandbox, objects)


def can(sandbox: SandboxHandle, user: str, verb: str, resource: str, namespace: str, sub: str = "") -> bool:
    args = ["auth", "can-i", verb, resource, "-n", namespace] + ([f"--subresource={sub}"] if sub else [])
    return as_user(sandbox, user, *args).stdout.strip() == "yes"


def create(box: SandboxHandle, manifest: dict[str, Any], namespace: str = TEAM_A) -> dict[str, Any]:
    return json.loads(box.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(manifest)))


def job(box: SandboxHandle, name: str, namespace: str = TEAM_A) -> dict[str, Any]:
    """A TrainingJob made by its namespace's admin (through the tenant role aggregated into admin)."""
    user = ALICE if namespace == TEAM_A else CAROL
    out = as_user(box, user, "create", "-n", namespace, "-o", "json", "-f", "-",
                  input=json.dumps(training_job(name, namespace)))  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def gang_placement(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": TJ_API, "kind": "GangPlacement", "metadata": {"name": name},
        "spec": {"source": "gputopo", "gang": name, "size": 2},
    }  # fmt: skip
    if owner is not None:
        body["metadata"]["ownerReferences"] = [owner]
    return body


# -- the operator's state -----------------------------------------------------------------------------------------


def test_a_tenant_may_not_write_a_trainingjobs_status_naming_victims(box: SandboxHandle) -> None:
    job(box, "victim", TEAM_B)
    job(box, "preemptor")
    nomination = {"status": {"nomination": {"victims": [f"{TEAM_B}/victim"], "gpus": [{"node": "n", "gpus": [0]}]}}}
    out = as_user(box, ALICE, "patch", "trainingjob", "preemptor", "-n", TEAM_A, "--subresource=status",
                  "--type=merge", "-p", json.dumps(nomination))  # fmt: skip
    message = refused(out, STATE_POLICY)
    assert "only the operator (system:serviceaccount:" in message and "writes TrainingJob status" in message
    assert f"{ALICE} may not update trainingjobs/status {TEAM_A}/preemptor" in message
    status = box.get_json("trainingjob", "preemptor", "-n", TEAM_A).get("status") or {}
    assert "nomination" not in status


def test_a_tenant_may_not_create_a_gangplacement(box: SandboxHandle) -> None:
    out = as_user(box, ALICE, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(gang_placement("forged")))
    assert "writes GangPlacements" in refused(out, STATE_POLICY)
    assert not box.kubectl("get", "gangplacement", "forged", "-n", TEAM_A, "--ignore-not-found").strip()


CHANGES = [
    ("ranks", "status", {"status": {"ranks": [{"rank": 0, "node": "elsewhere", "gpus": [0, 1]}]}}),
    ("nomination", "status", {"status": {"nomination": {"victims": [f"{TEAM_B}/victim"]}}}),
    ("size", "", {"spec": {"size": 1}}),
]


@pytest.mark.parametrize(("case", "sub", "patch"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_tenant_may_not_change_the_operators_gangplacement(
    box: SandboxHandle, case: str, sub: str, patch: dict[str, Any]
) -> None:
    name = f"placed-{case}"
    created = as_operator(box, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(gang_placement(name)))
    assert created.returncode == 0, created.stderr  # the operator's own write passes
    status = {"status": {"phase": "Running", "ranks": [{"rank": 0, "node": "n", "gpus": [0]}]}}
    written = as_operator(box, "patch", "gangplacement", name, "-n", TEAM_A, "--subresource=status",
                          "--type=merge", "-p", json.dumps(status))  # fmt: skip
    assert written.returncode == 0, written.stderr
    args = ["patch", "gangplacement", name, "-n", TEAM_A, "--type=merge", "-p", json.dumps(patch)]
    out = as_user(box, ALICE, *args, *([f"--subresource={sub}"] if sub else []))
    assert f"may not update gangplacements{'/' + sub if sub else ''} {TEAM_A}/{name}" in refused(out, STATE_POLICY)
    stored = box.get_json("gangplacement", name, "-n", TEAM_A)
    assert stored["spec"]["size"] == 2 and stored["status"]["ranks"] == status["status"]["ranks"], case


def test_the_garbage_collector_may_still_orphan_a_gangplacement(box: SandboxHandle) -> None:
    """Deleting a gang's owner with propagationPolicy Orphan makes the garbage collector drop the owner reference
    from the GangPlacement (an update by kube-controller-manager), which the policy must let through."""
    owner = create(box, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gang-owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gang-owner", "uid": owner["metadata"]["uid"]}
    created = as_operator(box, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(gang_placement("owned", ref)))
    assert created.returncode == 0, created.stderr
    box.kubectl("delete", "configmap", "gang-owner", "-n", TEAM_A, "--cascade=orphan", "--wait=false")
    box.wait_for(
        "the garbage collector to orphan the GangPlacement",
        lambda: not box.get_json("gangplacement", "owned", "-n", TEAM_A)["metadata"].get("ownerReferences"),
        timeout=60,
        every=0.5,
    )


# -- gputopo's gate and the label of a TrainingJob's pod -----------------------------------------------------------


def test_a_tenant_may_not_lift_gputopos_gate(box: SandboxHandle) -> None:
    gated = json.dumps(pod("gated", gates=[OTHER_GATE, GATE]))
    made = as_user(box, ALICE, "create", "-n", TEAM_A, "-f", "-", input=gated)
    assert made.returncode == 0, made.stderr
    # Her own gate is hers to lift: the first is OTHER_GATE.
    lifted = as_user(box, ALICE, "patch", "pod", "gated", "-n", TEAM_A, "--type=json",
                     "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}]))  # fmt: skip
    assert lifted.returncode == 0, lifted.stderr
    out = as_user(box, ALICE, "patch", "pod", "gated", "-n", TEAM_A, "--type=json",
                  "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}]))  # fmt: skip
    assert f"only the operator lifts the scheduling gate {GATE}" in refused(out, STATE_POLICY)
    gates = box.get_json("pod", "gated", "-n", TEAM_A)["spec"].get("schedulingGates", [])
    assert [g["name"] for g in gates] == [GATE]


def test_a_member_of_a_break_glass_group_may_lift_the_gate(box: SandboxHandle) -> None:
    box.kubectl("create", "-n", TEAM_A, "-f", "-", input=json.dumps(pod("stranded", gates=[GATE])))
    ops = json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}])
    groups = ["system:masters", "system:authenticated"]
    out = kubectl_run(box, "patch", "pod", "stranded", "-n", TEAM_A, "--type=json", "-p", ops, user=ON_CALL,
                      groups=groups)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not box.get_json("pod", "stranded", "-n", TEAM_A)["spec"].get("schedulingGates")


def _forged_owner(box: SandboxHandle) -> dict[str, Any]:
    uid = job(box, "forged-owner")["metadata"]["uid"]
    return {"apiVersion": TJ_API, "kind": "TrainingJob", "name": "forged-owner", "uid": uid, "controller": True}


LABELLED = [("without-an-owner", False), ("with-a-forged-trainingjob-owner", True)]


@pytest.mark.parametrize(("case", "owned"), LABELLED, ids=[c[0] for c in LABELLED])
def test_a_tenant_may_not_create_a_pod_labelled_as_a_trainingjobs(box: SandboxHandle, case: str, owned: bool) -> None:
    owners = [_forged_owner(box)] if owned else []
    manifest = pod(f"ungated-{case}", labels={LABEL_JOB: "forged-owner"}, owners=owners)
    out = as_user(box, ALICE, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(manifest))
    assert f"only the operator sets the label {LABEL_JOB}" in refused(out, STATE_POLICY)


def test_a_tenant_may_not_add_the_trainingjob_label_to_a_pod(box: SandboxHandle) -> None:
    made = as_user(box, ALICE, "create", "-n", TEAM_A, "-f", "-", input=json.dumps(pod("plain", labels={"app": "x"})))
    assert made.returncode == 0, made.stderr
    relabelled = as_user(box, ALICE, "label", "pod", "plain", "-n", TEAM_A, "app=y", "--overwrite")
    assert relabelled.returncode == 0, relabelled.stderr  # her other labels are hers
    out = as_user(box, ALICE, "label", "pod", "plain", "-n", TEAM_A, f"{LABEL_JOB}=someone-elses")
    assert f"only the operator sets the label {LABEL_JOB}" in refused(out, STATE_POLICY)


# -- the tenant roles ----------------------------------------------------------------------------------------------

ACCESS = [
    ("admin-runs-trainingjobs", CAROL, "create", "trainingjobs.gputopo.io", "", True),
    ("admin-deletes-trainingjobs", CAROL, "delete", "trainingjobs.gputopo.io", "", True),
    ("admin-reads-gangplacements", CAROL, "list", "gangplacements.gputopo.io", "", True),
    ("admin-writes-no-trainingjob-status", CAROL, "patch", "trainingjobs.gputopo.io", "status", False),
    ("admin-creates-no-gangplacements", CAROL, "create", "gangplacements.gputopo.io", "", False),
    ("admin-patches-no-gangplacements", CAROL, "patch", "gangplacements.gputopo.io", "", False),
    ("admin-writes-no-gangplacement-status", CAROL, "patch", "gangplacements.gputopo.io", "status", False),
    ("viewer-reads-trainingjobs", BOB, "list", "trainingjobs.gputopo.io", "", True),
    ("viewer-reads-gangplacements", BOB, "watch", "gangplacements.gputopo.io", "", True),
    ("viewer-creates-no-trainingjobs", BOB, "create", "trainingjobs.gputopo.io", "", False),
]


@pytest.mark.parametrize(("case", "user", "verb", "resource", "sub", "allowed"), ACCESS, ids=[c[0] for c in ACCESS])
def test_tenant_roles_aggregate_into_admin_edit_and_view_without_status(
    box: SandboxHandle, case: str, user: str, verb: str, resource: str, sub: str, allowed: bool
) -> None:
    namespace = TEAM_B if user == CAROL else TEAM_A
    assert can(box, user, verb, resource, namespace, sub) is allowed, case
