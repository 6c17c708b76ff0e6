"""The probe's own-node ValidatingAdmissionPolicy on the sandbox's real kube-apiserver, for ResourceSlices: the probe
(playing NVIDIA's DRA driver in fake mode) may write only the slices of the node its token is bound to.

The sandbox's fake probes run with the sandbox's admin credentials, not with ServiceAccount tokens, so the probe is
impersonated as kube-apiserver authenticates its pod-bound token: its ServiceAccount's user name with the extra
``authentication.kubernetes.io/node-name`` (kubectl --as-user-extra). The impersonated user is also put in
system:masters, so that RBAC lets every request through and only the policy decides. The policy is applied exactly
as ``helm template`` renders it; the writes are server-side dry runs, which run admission and store nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from chart_helpers import NS, POLICY, PROBE, find, render

from gputopo.sandbox.testing import SandboxHandle

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
PROBE_USER = f"system:serviceaccount:{NS}:{PROBE}"
EXISTING = "gputopo-slice-policy-test"


def resource_slice(name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "gpu.nvidia.com",
        "pool": {"name": node or "all", "generation": 0, "resourceSliceCount": 1},
        "devices": [],
    }
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def as_user(sandbox: SandboxHandle, user: str, node: str | None, *args: str, body: Any = None) -> tuple[int, str]:
    """kubectl ``args`` as ``user`` (in system:masters), with the node-name extra of a pod-bound token on ``node``."""
    who = ["--as", user, "--as-group", "system:masters", "--as-group", "system:authenticated"]
    if node is not None:
        who += ["--as-user-extra", f"{NODE_NAME_KEY}={node}"]
    proc = subprocess.run(
        [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), *who, *args],
        input=json.dumps(body) if body is not None else None, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def create(sandbox: SandboxHandle, user: str, node: str | None, slice_: dict[str, Any]) -> tuple[int, str]:
    return as_user(sandbox, user, node, "create", "--dry-run=server", "-f", "-", body=slice_)


@pytest.fixture(scope="module")
def policy(sandbox: SandboxHandle) -> Iterator[tuple[str, str]]:
    """The chart's own-node policy and binding in effect, a slice of node B in the cluster; nodes (A, B)."""
    assert len(sandbox.nodes) >= 2, "the policy tests need two nodes"
    a, b = sandbox.nodes[0], sandbox.nodes[1]
    docs = render("--show-only", "templates/probe/admission-policy.yaml")
    objects = [find(docs, "ValidatingAdmissionPolicy"), find(docs, "ValidatingAdmissionPolicyBinding")]
    sandbox.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=slice-policy-test", "-f", "-",
        input="\n---\n".join(json.dumps(o) for o in objects),
    )  # fmt: skip
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(resource_slice(EXISTING, b)))
    sandbox.wait_for(
        "the own-node policy to take effect",
        lambda: create(sandbox, PROBE_USER, a, resource_slice("probe-wait", b))[0] != 0,
        timeout=30,
        every=0.5,
    )
    yield a, b
    sandbox.kubectl("delete", "resourceslice", EXISTING, "--ignore-not-found", check=False)
    sandbox.kubectl("delete", "validatingadmissionpolicybinding", POLICY, "--ignore-not-found", check=False)
    sandbox.kubectl("delete", "validatingadmissionpolicy", POLICY, "--ignore-not-found", check=False)


def test_the_probe_may_publish_its_own_nodes_slice(sandbox: SandboxHandle, policy: tuple[str, str]) -> None:
    a, _ = policy
    rc, out = create(sandbox, PROBE_USER, a, resource_slice(f"{a}-gpu.nvidia.com", a))
    assert rc == 0, out


REFUSED = [
    ("another-nodes-slice", "b", "may not change resourceslices gputopo-probe-slice of node {b}"),
    ("a-slice-of-all-nodes", None, "of node (none)"),
]


@pytest.mark.parametrize(("case", "target", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_probe_may_not_publish_a_slice_for_another_node(
    sandbox: SandboxHandle, policy: tuple[str, str], case: str, target: str | None, message: str
) -> None:
    a, b = policy
    rc, out = create(sandbox, PROBE_USER, a, resource_slice("gputopo-probe-slice", b if target else None))
    assert rc != 0, f"{case}: {out}"
    assert POLICY in out and "may write only the ResourceSlices of its own node" in out, out
    assert message.format(b=b) in out, out


def test_the_probe_may_not_delete_another_nodes_slice(sandbox: SandboxHandle, policy: tuple[str, str]) -> None:
    a, b = policy
    rc, out = as_user(sandbox, PROBE_USER, a, "delete", "resourceslice", EXISTING, "--dry-run=server")
    assert rc != 0 and f"of node {b}" in out, out
    rc, out = as_user(sandbox, PROBE_USER, b, "delete", "resourceslice", EXISTING, "--dry-run=server")
    assert rc == 0, out


def test_a_token_without_a_node_is_refused(sandbox: SandboxHandle, policy: tuple[str, str]) -> None:
    a, _ = policy
    rc, out = create(sandbox, PROBE_USER, None, resource_slice("gputopo-probe-slice", a))
    assert rc != 0 and "not bound to a pod on a node" in out, out


def test_other_users_are_not_the_policys_business(sandbox: SandboxHandle, policy: tuple[str, str]) -> None:
    a, b = policy
    rc, out = create(sandbox, f"system:serviceaccount:{NS}:nvidia-dra-driver", a, resource_slice("driver-b", b))
    assert rc == 0, out
