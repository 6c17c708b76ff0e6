"""The sandbox is a real platform: CRDs served by a real kube-apiserver, pods bound by a real kube-scheduler."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.sandbox import SandboxError
from gputopo.sandbox.testing import SandboxHandle

EXAMPLES = Path(__file__).parents[2] / "examples"
NS = "platform-test"
TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}}


def job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"workers": 1, "gpusPerWorker": 8, "template": TEMPLATE, **spec},
    }


@pytest.fixture(scope="module")
def ns(sandbox: SandboxHandle) -> Any:
    sandbox.kubectl("create", "namespace", NS, check=False)
    yield NS
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_crds_are_served(sandbox: SandboxHandle) -> None:
    out = sandbox.kubectl("api-resources", "--api-group", "gputopo.io", "-o", "name")
    assert set(out.split()) >= {"trainingjobs.gputopo.io", "nodetopologies.gputopo.io"}


def test_simulated_nodes_carry_gpus(sandbox: SandboxHandle) -> None:
    nodes = sandbox.get_json("nodes")["items"]
    gpus = {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes}
    assert set(sandbox.nodes) <= set(gpus)
    assert all(int(gpus[name]) >= 1 for name in sandbox.nodes)
    tiers = {n["metadata"]["labels"].get("fabric.topograph.run/tier-0") for n in nodes}
    assert len(tiers) > 1


def _served(path: Path, versions: set[str]) -> bool:
    """Whether the sandbox serves every document's apiVersion (examples/gangs/ has a JobSet, a CRD it may lack)."""
    return all(d.get("apiVersion") in versions for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))


def test_examples_apply(sandbox: SandboxHandle, ns: str) -> None:
    files = sorted(p for p in EXAMPLES.rglob("*.yaml") if "invalid" not in p.relative_to(EXAMPLES).parts)
    assert files and any(p.parent != EXAMPLES for p in files), "examples/ has no manifests (or lost examples/nvl72)"
    versions = set(sandbox.kubectl("api-versions").split())
    for path in files:
        if path.parent.name == "gangs" and not _served(path, versions):
            continue
        out = sandbox.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(path))
        assert "created" in out or "configured" in out, out


INVALID = [
    ("zero-workers", {"workers": 0}, "spec.workers"),
    ("too-many-gpus", {"gpusPerWorker": 64}, "spec.gpusPerWorker"),
    ("negative-restarts", {"failurePolicy": {"maxRestarts": -1}}, "spec.failurePolicy.maxRestarts"),
    ("unknown-intra-node", {"topology": {"intraNode": "pcie-please"}}, "spec.topology.intraNode"),
    (
        "preferred-above-required",
        {"workers": 4, "topology": {"interNode": {"requiredTier": 0, "preferredTier": 1}}},
        "preferredTier must not be above requiredTier",
    ),
    ("gang-too-large", {"workers": 1024, "gpusPerWorker": 16}, "at most 8192 GPUs"),
    ("nvlink-for-one-gpu", {"gpusPerWorker": 1, "topology": {"intraNode": "nvlink"}}, "spec.topology.intraNode"),
    ("slice-does-not-divide", {"workers": 12, "topology": {"sliceSize": 8}}, "spec.topology.sliceSize"),
    ("no-containers", {"template": {"spec": {"containers": []}}}, "spec.template.spec.containers"),
    (
        "zero-checkpoint-interval",
        {"preemption": {"checkpointIntervalSeconds": 0}},
        "spec.preemption.checkpointIntervalSeconds: Invalid value",
    ),
    (
        "negative-checkpoint-interval",
        {"preemption": {"checkpointIntervalSeconds": -600}},
        "spec.preemption.checkpointIntervalSeconds: Invalid value",
    ),
]


@pytest.mark.parametrize(("case", "spec", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_trainingjob_is_rejected(
    sandbox: SandboxHandle, ns: str, case: str, spec: dict[str, Any], message: str
) -> None:
    manifest = json.dumps(job(f"bad-{case}", **spec))
    with pytest.raises(SandboxError) as info:
        sandbox.kubectl("apply", "-f", "-", input=manifest)
    assert message in str(info.value)


def test_missing_template_is_rejected(sandbox: SandboxHandle, ns: str) -> None:
    manifest = job("no-template")
    del manifest["spec"]["template"]
    with pytest.raises(SandboxError, match=r"spec.template: Required value"):
        sandbox.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def test_printer_columns(sandbox: SandboxHandle, ns: str) -> None:
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(job("columns")))
    header = sandbox.kubectl("get", "tj", "-n", ns).splitlines()[0].split()
    assert header == ["NAME", "PHASE", "WORKERS", "GPUS", "BUSBW", "RESTARTS", "AGE"]
    sandbox.kubectl("delete", "tj", "columns", "-n", ns)


def test_defaults_are_applied_by_the_server(sandbox: SandboxHandle, ns: str) -> None:
    created = json.loads(sandbox.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                         input=json.dumps(job("defaults"))))  # fmt: skip
    assert created["spec"]["failurePolicy"] == {
        "onLinkFailure": "Reschedule",
        "maxRestarts": 3,
        "backoffSeconds": 10,
        "gracePeriodSeconds": 30,
        "cooldownSeconds": 30,
    }
    assert created["spec"]["topology"]["intraNode"] == "any"


def test_explain(sandbox: SandboxHandle) -> None:
    out = sandbox.kubectl("explain", "trainingjob.spec")
    assert "gpusPerWorker" in out and "failurePolicy" in out


def test_plain_gpu_pod_is_bound_and_running(sandbox: SandboxHandle, ns: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain-gpu", "namespace": ns},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))

    def running() -> Any:
        got = sandbox.get_json("pod", "plain-gpu", "-n", ns)
        return got if got["status"].get("phase") == "Running" else None

    got = sandbox.wait_for("the GPU pod to run", running, timeout=60)
    assert got["spec"]["nodeName"] in sandbox.nodes
    events = sandbox.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=plain-gpu")
    assert "Scheduled" in events
    sandbox.kubectl("delete", "pod", "plain-gpu", "-n", ns, "--grace-period=0", "--force", check=False)


def test_kubectl_is_the_pinned_version(sandbox: SandboxHandle) -> None:
    out = subprocess.run(
        [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), "version", "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    versions = json.loads(out)
    assert versions["serverVersion"]["gitVersion"].startswith("v1.37")


def test_up_with_another_shape_is_refused(sandbox: SandboxHandle) -> None:
    with pytest.raises(SandboxError, match="already up"):
        sandbox.sandbox.up(nodes=len(sandbox.nodes) + 1, probes=False)
    assert sandbox.sandbox.status().running


def _arg(argv: list[str], flag: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{flag}=")), None)


def _seconds(duration: str) -> float:
    """A Go duration ("3m20s", "20s", "1h0m0s") in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_kwok_renews_node_leases_well_within_the_node_monitor_grace(sandbox: SandboxHandle) -> None:
    """A kubelet renews its Lease every quarter of its duration; kube-controller-manager marks a node Unknown
    (and taints it) when none came for its grace period. kwokctl's resolved configuration must leave room for
    two renewals in the grace, or every node flaps between renewals."""
    docs = list(yaml.safe_load_all((sandbox.sandbox.cluster_dir / "kwok.yaml").read_text()))
    cluster = next(d for d in docs if d and d.get("kind") == "KwokctlConfiguration")
    argv = {c["name"]: [*c.get("args", [])] for c in cluster["components"]}
    lease = _arg(argv["kwok-controller"], "node-lease-duration-seconds")
    grace = _arg(argv["kube-controller-manager"], "node-monitor-grace-period")
    assert lease is not None and grace is not None
    assert 2 * float(lease) / 4 < _seconds(grace)
    kwok = next(d for d in docs if d and d.get("kind") == "KwokConfiguration")
    assert kwok["options"]["podPlayStageParallelism"] >= 32
    tainted = [n["metadata"]["name"] for n in sandbox.get_json("nodes")["items"] if n["spec"].get("taints")]
    assert tainted == []
