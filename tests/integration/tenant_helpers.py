"""Tenants of a shared cluster, for the tests of what the chart keeps from them: a release of the chart rendered
by ``helm template``, its admission policies and RBAC applied to the sandbox's API server, two tenant namespaces,
and ``kubectl --as`` runs as a namespace-admin user, a viewer or the operator's ServiceAccount."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from chart_helpers import CHART, helm

from gputopo.sandbox.testing import SandboxHandle

__all__ = [
    "ALICE",
    "BOB",
    "CAROL",
    "LIMITS_POLICY",
    "OPERATOR_SA",
    "OPERATOR_USER",
    "OPS_NS",
    "RELEASE",
    "STATE_POLICY",
    "TEAM_A",
    "TEAM_B",
    "apply",
    "as_operator",
    "as_user",
    "delete",
    "kubectl_run",
    "pod",
    "refused",
    "release_docs",
    "tenants",
]

RELEASE = "gputopo-tenancy"
OPS_NS = "gputopo-tenancy-system"
OPERATOR_SA = f"{RELEASE}-operator"
OPERATOR_USER = f"system:serviceaccount:{OPS_NS}:{OPERATOR_SA}"
STATE_POLICY = f"{RELEASE}-operator-state"
LIMITS_POLICY = f"{RELEASE}-operator-limits"
TEAM_A, TEAM_B = "tenancy-team-a", "tenancy-team-b"
ALICE = "alice@team-a"  # admin of TEAM_A
BOB = "bob@team-a"  # viewer of TEAM_A
CAROL = "carol@team-b"  # admin of TEAM_B, with nothing more


def release_docs(*values: str, namespace: str = OPS_NS) -> list[dict[str, Any]]:
    """The chart as ``helm template`` renders it for the release ``RELEASE`` in ``namespace``."""
    import yaml

    out = helm("template", RELEASE, str(CHART), "-n", namespace, *values)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def kubectl_run(
    sandbox: SandboxHandle, *args: str, user: str | None = None, groups: Iterable[str] = (), input: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig)]
    if user is not None:
        argv += [f"--as={user}", *(f"--as-group={g}" for g in groups)]
    return subprocess.run([*argv, *args], input=input, capture_output=True, text=True, timeout=60, check=False)


def as_user(
    sandbox: SandboxHandle, user: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``kubectl`` as the user ``user`` (authenticated, in no group of its own)."""
    return kubectl_run(sandbox, *args, user=user, groups=["system:authenticated"], input=input)


def as_operator(sandbox: SandboxHandle, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``kubectl`` as the operator's ServiceAccount, with the groups the API server gives a ServiceAccount."""
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{OPS_NS}", "system:authenticated"]
    return kubectl_run(sandbox, *args, user=OPERATOR_USER, groups=groups, input=input)


def refused(out: subprocess.CompletedProcess[str], policy: str) -> str:
    """The denial's message, asserting that ``policy`` refused the request."""
    assert out.returncode != 0, f"the request passed: {out.stdout}"
    assert f"ValidatingAdmissionPolicy '{policy}'" in out.stderr, out.stderr
    return out.stderr


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    gates: Sequence[str] = (),
    owners: Sequence[dict[str, Any]] = (),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owners:
        meta["ownerReferences"] = list(owners)
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "containers": [{"name": "trainer", "image": "registry.k8s.io/pause:3.10"}],
        "tolerations": [{"operator": "Exists"}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def apply(sandbox: SandboxHandle, objects: Iterable[dict[str, Any]]) -> None:
    sandbox.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=tenancy-test", "-f", "-",
        input="\n---\n".join(json.dumps(o) for o in objects),
    )  # fmt: skip


def delete(sandbox: SandboxHandle, objects: Iterable[dict[str, Any]]) -> None:
    for o in objects:
        where = ["-n", o["metadata"]["namespace"]] if o["metadata"].get("namespace") else []
        kind = f"{o['kind'].lower()}.{o['apiVersion'].split('/')[0]}" if "/" in o["apiVersion"] else o["kind"]
        sandbox.kubectl("delete", kind, o["metadata"]["name"], *where, "--ignore-not-found", "--wait=false",
                        check=False)  # fmt: skip


def _binding(name: str, namespace: str, role: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }  # fmt: skip


def _platform_role(namespace: str) -> list[dict[str, Any]]:
    """What a platform that hands each team every right to gputopo's kinds in its namespace grants alice: RBAC
    then lets her write status and GangPlacements, so only the chart's policy stands in her way."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "gputopo-everything", "namespace": namespace},
        "rules": [{"apiGroups": ["gputopo.io"], "resources": ["*"], "verbs": ["*"]}],
    }  # fmt: skip
    binding = _binding("alice-gputopo-everything", namespace, "", ALICE)
    binding["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gputopo-everything"}
    return [role, binding]


@contextmanager
def tenants(sandbox: SandboxHandle, *, generous: bool) -> Iterator[None]:
    """TEAM_A (alice its admin, bob its viewer) and TEAM_B (carol its admin); with ``generous`` alice also holds
    every right to gputopo's kinds in TEAM_A. The namespaces go at the end."""
    for ns in (OPS_NS, TEAM_A, TEAM_B):
        phase = sandbox.kubectl("get", "namespace", ns, "-o", "jsonpath={.status.phase}", "--ignore-not-found")
        if phase.strip() == "Terminating":  # another module's namespace of that name is still going
            sandbox.kubectl("wait", "--for=delete", f"namespace/{ns}", "--timeout=120s", check=False)
        sandbox.kubectl("create", "namespace", ns, check=False)
    objects = [
        _binding("alice-admin", TEAM_A, "admin", ALICE),
        _binding("bob-view", TEAM_A, "view", BOB),
        _binding("carol-admin", TEAM_B, "admin", CAROL),
    ]
    if generous:
        objects += _platform_role(TEAM_A)
    apply(sandbox, objects)
    for ns in (TEAM_A, TEAM_B):

        def account(ns: str = ns) -> str:
            return sandbox.kubectl("get", "sa", "default", "-n", ns, check=False)

        sandbox.wait_for(f"the default ServiceAccount of {ns}", account)
    try:
        yield
    finally:
        for ns in (OPS_NS, TEAM_A, TEAM_B):
            sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)
