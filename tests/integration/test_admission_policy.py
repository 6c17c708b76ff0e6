"""The chart's placement-gate MutatingAdmissionPolicy against the sandbox's real kube-apiserver: it is accepted as
rendered, and on Pod CREATE it appends gputopo.io/placement to the GPU pods of gangs, and to no other pod.

The policy and its binding are applied exactly as `helm template` renders them (the release namespace of the
chart tests), real pods are created in a namespace of this module's own and read back, and everything is deleted
at the end.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from chart_helpers import find, render

from gputopo.gangs.model import GATE
from gputopo.sandbox.admission import GATING_LABEL, enable_gating
from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-gang-gate"
KUEUE_GATE = "kueue.x-k8s.io/admission"
GPU = {"limits": {"nvidia.com/gpu": "4"}}


def pod(name: str, *, labels: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
        gates: list[str] | None = None, **spec: Any) -> dict[str, Any]:  # fmt: skip
    """A pod of one container; ``resources`` that container's, ``gates`` its scheduling gates."""
    container: dict[str, Any] = {"name": "trainer", "image": "registry.k8s.io/pause:3.10"}
    if resources is not None:
        container["resources"] = resources
    body: dict[str, Any] = {"containers": [container], **spec}
    if gates is not None:
        body["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": body}


def indexed_job_labels(job: str, index: int) -> dict[str, str]:
    """The labels the Job controller gives a pod of an Indexed Job."""
    uid = "0b1e7c4e-5d0f-4a53-9d4c-1f7a3c2b9e01"
    return {
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job,
        "controller-uid": uid, "job-name": job, "batch.kubernetes.io/job-completion-index": str(index),
    }  # fmt: skip


def create(sandbox: SandboxHandle, manifest: dict[str, Any], namespace: str = NS, *, dry_run: bool = False) -> Any:
    """Create ``manifest`` for real (or server-side dry run) and return the object the API server stored."""
    args = ["create", "-n", namespace, "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    return json.loads(sandbox.kubectl(*args, input=json.dumps(manifest)))


def gates(stored: dict[str, Any]) -> list[str]:
    return [g["name"] for g in stored["spec"].get("schedulingGates", [])]


@pytest.fixture(scope="module")
def policy(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    """The chart's policy and binding applied as rendered, in effect, and removed at the end with the pods."""
    docs = render()
    objects = [find(docs, "MutatingAdmissionPolicy"), find(docs, "MutatingAdmissionPolicyBinding")]
    names = [o["metadata"]["name"] for o in objects]
    sandbox.kubectl("create", "namespace", NS, check=False)
    enable_gating(sandbox.kubectl, NS)  # gating is opt-in per namespace
    sandbox.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=gang-gate-test", "-f", "-",
        input="\n---\n".join(json.dumps(o) for o in objects),
    )  # fmt: skip
    sandbox.wait_for(
        "the default ServiceAccount", lambda: sandbox.kubectl("get", "sa", "default", "-n", NS, check=False)
    )

    # The API server loads a policy and its binding a moment after they are written: wait for a probe pod's gate.
    probe = pod("probe", labels={"gputopo.io/gang": "probe"}, resources=GPU)
    sandbox.wait_for(
        "the placement-gate policy to take effect",
        lambda: gates(create(sandbox, probe, dry_run=True)) == [GATE],
        timeout=30,
        every=0.5,
    )
    yield sandbox
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    sandbox.kubectl("delete", "mutatingadmissionpolicybinding", names[1], "--ignore-not-found", check=False)
    sandbox.kubectl("delete", "mutatingadmissionpolicy", names[0], "--ignore-not-found", check=False)


CASES = [
    ("indexed-job-gpu-pod-after-kueues-gate",
     pod("indexed-0", labels=indexed_job_labels("trainer", 0), resources=GPU, gates=[KUEUE_GATE]),
     [KUEUE_GATE, GATE]),
    ("gang-label-gpu-pod-without-gates", pod("gang-0", labels={"gputopo.io/gang": "g"}, resources=GPU), [GATE]),
    ("already-gated-left-as-is",
     pod("gated-0", labels={"gputopo.io/gang": "g"}, resources=GPU, gates=[GATE]), [GATE]),
    ("zero-gpu-gang-pod", pod("nogpu-0", labels={"gputopo.io/gang": "g"},
                              resources={"limits": {"nvidia.com/gpu": "0"}}), []),
    ("cpu-only-gang-pod", pod("cpu-0", labels=indexed_job_labels("cpu", 0)), []),
    ("gpu-pod-in-no-gang", pod("lonely-0", labels={"app": "notebook"}, resources=GPU), []),
    ("trainingjob-pod", pod("tj-0", labels={"gputopo.io/job": "tj", "gputopo.io/gang": "g"}, resources=GPU), []),
    ("gpu-init-container-of-a-jobset",
     pod("init-0", labels={"jobset.sigs.k8s.io/jobset-name": "js"},
         initContainers=[{"name": "warmup", "image": "registry.k8s.io/pause:3.10", "resources": GPU}]), [GATE]),
    ("dra-claim-of-a-leaderworkerset",
     pod("dra-0", labels={"leaderworkerset.sigs.k8s.io/name": "lws"},
         resourceClaims=[{"name": "gpus", "resourceClaimName": "lws-0-gpus"}]), [GATE]),
    ("pytorchjob-gpu-pod", pod("ptj-0", labels={"training.kubeflow.org/job-name": "ptj"}, resources=GPU), [GATE]),
    ("kueue-pod-group-gpu-pod", pod("kpg-0", labels={"kueue.x-k8s.io/pod-group-name": "kpg"}, resources=GPU),
     [GATE]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "manifest", "want"), CASES, ids=[c[0] for c in CASES])
def test_gate_is_appended_to_gpu_pods_of_gangs_only(
    policy: SandboxHandle, case: str, manifest: dict[str, Any], want: list[str]
) -> None:
    stored = create(policy, manifest)
    try:
        assert gates(stored) == want, case
    finally:
        policy.kubectl("delete", "pod", manifest["metadata"]["name"], "-n", NS, "--wait=false", check=False)


OPT_IN = [
    ("unlabelled", None, []),
    ("opted-out", "disabled", []),
    ("opted-in", "enabled", [GATE]),
]


@pytest.mark.parametrize(("case", "label", "want"), OPT_IN, ids=[c[0] for c in OPT_IN])
def test_only_namespaces_that_opt_in_are_gated(
    policy: SandboxHandle, case: str, label: str | None, want: list[str]
) -> None:
    ns = f"gputopo-gang-gate-{case}"
    policy.kubectl("create", "namespace", ns, check=False)
    try:
        if label is not None:
            policy.kubectl("label", "namespace", ns, f"{GATING_LABEL}={label}", "--overwrite")
        policy.wait_for(
            "the default ServiceAccount", lambda: policy.kubectl("get", "sa", "default", "-n", ns, check=False)
        )
        manifest = pod("gang-0", labels={"gputopo.io/gang": "g"}, resources=GPU)
        assert gates(create(policy, manifest, namespace=ns, dry_run=True)) == want, case
    finally:
        policy.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_pods_in_kube_system_are_never_gated(policy: SandboxHandle) -> None:
    manifest = pod("gputopo-gang-gate-test", labels={"gputopo.io/gang": "g"}, resources=GPU)
    stored = create(policy, manifest, namespace="kube-system")
    try:
        assert gates(stored) == []
    finally:
        policy.kubectl("delete", "pod", manifest["metadata"]["name"], "-n", "kube-system", "--wait=false", check=False)


def test_pod_of_a_podgroup_is_gated(policy: SandboxHandle) -> None:
    manifest = pod("podgroup-0", resources=GPU, schedulingGroup={"podGroupName": "trainer"})
    out = subprocess.run(
        [str(policy.bin_dir / "kubectl"), "--kubeconfig", str(policy.kubeconfig), "create", "-n", NS, "-o", "json",
         "-f", "-"], input=json.dumps(manifest), capture_output=True, text=True,
    )  # fmt: skip
    # The sandbox runs Kubernetes 1.37 with GenericWorkload on: the field is kept, and the pod gated.
    assert out.returncode == 0, out.stderr
    stored = json.loads(out.stdout)
    try:
        assert stored["spec"]["schedulingGroup"] == {"podGroupName": "trainer"}
        assert gates(stored) == [GATE]
    finally:
        policy.kubectl("delete", "pod", manifest["metadata"]["name"], "-n", NS, "--wait=false", check=False)
