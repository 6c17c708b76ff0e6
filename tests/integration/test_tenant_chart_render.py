"""What the chart renders for shared clusters, with helm alone: the operator's writes bound only in the namespaces
it is given (reads and cluster-scoped kinds stay cluster-wide, nothing lost on the way), kube-system refused as
one of them, the operator-state and operator-limits policies naming the operator's ServiceAccount, and the tenant
roles aggregated into edit and view without status.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_helpers import CHART, NS, OPERATOR, RELEASE, find, helm, render

NAMESPACES = ("team-a", "team-b")
ONLY_THERE = ("--set", "operator.config.namespaces={team-a,team-b}")
NAMESPACED = f"{OPERATOR}-namespaced"
STATE = f"{RELEASE}-operator-state"
LIMITS = f"{RELEASE}-operator-limits"


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(group, resource) -> verbs, over all of the role's rules."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules") or []:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def union(*grants: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for g in grants:
        for key, verbs in g.items():
            out.setdefault(key, set()).update(verbs)
    return out


WRITES = {"create", "update", "patch", "delete"}


@pytest.mark.parametrize("allocation", ["devicePlugin", "dra"])
def test_with_namespaces_the_operators_writes_are_bound_only_there(allocation: str) -> None:
    docs = render(*ONLY_THERE, "--set", f"operator.config.gpuAllocation={allocation}")
    cluster = granted(find(docs, "ClusterRole", OPERATOR))
    namespaced = granted(find(docs, "ClusterRole", NAMESPACED))
    everywhere = granted(find(render("--set", f"operator.config.gpuAllocation={allocation}"), "ClusterRole", OPERATOR))

    for kind in (("", "pods"), ("", "pods/eviction"), ("", "services"), ("", "events"), ("gputopo.io", "trainingjobs"),
                 ("gputopo.io", "trainingjobs/status"), ("gputopo.io", "gangplacements"),
                 ("kueue.x-k8s.io", "workloads")):  # fmt: skip
        assert not cluster.get(kind, set()) & WRITES, f"{kind} written cluster-wide"
        assert namespaced[kind] & (WRITES | {"get"}), kind
    assert cluster[("", "pods")] == {"get", "list", "watch"}, "the gang watches list every namespace's pods"
    assert cluster[("", "nodes")] == {"get", "list", "watch"}
    assert cluster[("kopf.dev", "kopfpeerings")] >= {"create", "patch"}, "kopf's peering in each namespace"
    assert not any(group in ("", "gputopo.io") and res in ("nodes", "nodetopologies") for group, res in namespaced)
    # Nothing granted without namespaces is lost with them, but kopf's ConfigMap watch, granted per namespace.
    everywhere.pop(("", "configmaps"))
    assert union(cluster, namespaced) == everywhere
    if allocation == "dra":
        assert cluster[("resource.k8s.io", "resourceclaims")] == {"get", "list", "watch"}
        assert namespaced[("resource.k8s.io", "resourceclaims")] == {"create", "delete", "patch"}


def test_with_namespaces_one_rolebinding_each_and_one_clusterrolebinding_for_the_reads() -> None:
    docs = render(*ONLY_THERE)
    bindings = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == NAMESPACED]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(NAMESPACES)
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole" and binding["roleRef"]["name"] == NAMESPACED
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": NS}]
    cluster_bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == OPERATOR]
    assert [b["roleRef"]["name"] for b in cluster_bindings] == [OPERATOR]
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == NAMESPACED]


def test_without_namespaces_one_clusterrole_holds_everything() -> None:
    docs = render()
    assert not [d for d in docs if d["metadata"]["name"] == NAMESPACED]
    assert {"create", "delete", "patch"} <= granted(find(docs, "ClusterRole", OPERATOR))[("", "pods")]


def test_kube_system_is_refused_as_one_of_the_operators_namespaces() -> None:
    out = helm("template", RELEASE, str(CHART), "-n", NS, "--set", "operator.config.namespaces={team-a,kube-system}")
    assert out.returncode != 0
    assert "operator.config.namespaces names kube-system" in out.stderr, out.stderr


def _expressions(policy: dict[str, Any]) -> str:
    spec = policy["spec"]
    parts = [c["expression"] for c in spec.get("matchConditions", [])]
    parts += [v["expression"] for v in spec["validations"]]
    parts += [v.get("messageExpression", "") for v in spec["validations"]]
    return "\n".join(parts)


SERVICE_ACCOUNTS = [
    ("chart-made", (), f"system:serviceaccount:{NS}:{OPERATOR}"),
    ("named", ("--set", "operator.serviceAccount.name=placer"), f"system:serviceaccount:{NS}:placer"),
    ("existing", ("--set", "operator.serviceAccount.create=false", "--set", "operator.serviceAccount.name=ops"),
     f"system:serviceaccount:{NS}:ops"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "values", "user"), SERVICE_ACCOUNTS, ids=[c[0] for c in SERVICE_ACCOUNTS])
def test_both_policies_know_the_operator_by_its_serviceaccount(case: str, values: tuple[str, ...], user: str) -> None:
    docs = render(*values)
    for name in (STATE, LIMITS):
        policy = find(docs, "ValidatingAdmissionPolicy", name)
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert f'request.userInfo.username {"!=" if name == STATE else "=="} "{user}"' in _expressions(policy), case
        assert find(docs, "ValidatingAdmissionPolicyBinding", name)["spec"]["validationActions"] == ["Deny"]


def test_the_state_policy_matches_status_gangplacements_and_pods_but_no_deletion() -> None:
    rules = find(render(), "ValidatingAdmissionPolicy", STATE)["spec"]["matchConstraints"]["resourceRules"]
    matched = {(g, r): set(rule["operations"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert matched == {
        ("gputopo.io", "trainingjobs/status"): {"CREATE", "UPDATE"},
        ("gputopo.io", "gangplacements"): {"CREATE", "UPDATE"},
        ("gputopo.io", "gangplacements/status"): {"CREATE", "UPDATE"},
        ("", "pods"): {"CREATE", "UPDATE"},
    }


def test_policies_and_tenant_roles_can_be_turned_off() -> None:
    docs = render("--set", "operator.admissionPolicies.enabled=false", "--set", "operator.tenantRoles.enabled=false")
    names = {d["metadata"]["name"] for d in docs}
    assert not names & {STATE, LIMITS, f"{RELEASE}-edit", f"{RELEASE}-view"}
    assert f"{RELEASE}-probe-own-node" in names


def test_tenant_roles_aggregate_into_edit_and_view_without_status() -> None:
    docs = render()
    edit, view = find(docs, "ClusterRole", f"{RELEASE}-edit"), find(docs, "ClusterRole", f"{RELEASE}-view")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    read = {"get", "list", "watch"}
    assert granted(edit) == {
        ("gputopo.io", "trainingjobs"): read | {"create", "update", "patch", "delete", "deletecollection"},
        ("gputopo.io", "gangplacements"): read,
    }
    assert granted(view) == {("gputopo.io", "trainingjobs"): read, ("gputopo.io", "gangplacements"): read}


BREAK_GLASS = [
    ("default", (), '["system:masters"]'),
    ("kubeadm", ("--set", "operator.admissionPolicies.breakGlassGroups={system:masters,kubeadm:cluster-admins}"),
     '["system:masters","kubeadm:cluster-admins"]'),
    ("none", ("--set", "operator.admissionPolicies.breakGlassGroups=null"), None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "values", "groups"), BREAK_GLASS, ids=[c[0] for c in BREAK_GLASS])
def test_break_glass_groups_pass_the_state_policy_only(case: str, values: tuple[str, ...], groups: str | None) -> None:
    docs = render(*values)
    state = {
        c["name"]: c["expression"] for c in find(docs, "ValidatingAdmissionPolicy", STATE)["spec"]["matchConditions"]
    }
    if groups is None:
        assert "not-breaking-glass" not in state, case
    else:
        assert f"request.userInfo.groups.exists(g, g in {groups})" in state["not-breaking-glass"], case
    assert "groups" not in _expressions(find(docs, "ValidatingAdmissionPolicy", LIMITS))


def test_a_break_glass_group_that_would_break_the_expression_is_refused() -> None:
    out = helm("template", RELEASE, str(CHART), "-n", NS, "--set", 'operator.admissionPolicies.breakGlassGroups={a"b}')
    assert out.returncode != 0
    assert "/operator/admissionPolicies/breakGlassGroups/0" in out.stderr, out.stderr
