"""The chart's placement-gate admission policy in the sandbox: the MutatingAdmissionPolicy and its binding that
give the GPU pods of gangs gputopo does not own (Indexed Jobs, PodGroups, JobSets, ...) the scheduling gate
``gputopo.io/placement``, rendered by ``helm template`` from charts/gputopo exactly as a release would install
them, so that the sandbox's operator places such gangs whole. ``Sandbox.up(operator=True)`` installs them.

Gating is opt-in, as the chart installs it: only namespaces labelled ``gputopo.io/gating=enabled`` are gated, so
whatever expects its gangs' pods gated labels its namespace with ``enable_gating``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gputopo.gangs.model import GATE
from gputopo.sandbox.errors import SandboxError

__all__ = [
    "GATE_POLICY_TEMPLATE",
    "GATING_ENABLED",
    "GATING_LABEL",
    "PROBE_NAMESPACE",
    "RELEASE",
    "chart_dir",
    "enable_gating",
    "install_gate_policy",
    "render_gate_policy",
]

# The release name the sandbox renders the chart under: the policy is named <release>-placement-gate.
RELEASE = "gputopo"
GATE_POLICY_TEMPLATE = "templates/operator/gang-gate-policy.yaml"
# A namespace every cluster has and the binding never leaves out (it leaves out kube-system and the release's),
# where a server-side dry run shows whether the API server applies the policy yet (once labelled for gating).
PROBE_NAMESPACE = "kube-public"
# The namespace label that opts a namespace's gangs into gating (the chart's gangs.optIn).
GATING_LABEL = "gputopo.io/gating"
GATING_ENABLED = "enabled"
POLICY_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")

Kubectl = Callable[..., str]


def chart_dir() -> Path:
    """charts/gputopo of the source checkout gputopo runs from."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "charts" / "gputopo"
        if (candidate / "Chart.yaml").is_file():
            return candidate
    raise SandboxError("charts/gputopo not found; run the sandbox from a gputopo source checkout")


def render_gate_policy(helm: Path, namespace: str, chart: Path | None = None) -> list[dict[str, Any]]:
    """The policy and its binding as ``helm template`` renders them for a release in ``namespace``."""
    if not helm.is_file():
        raise SandboxError(f"helm is not built yet (no {helm}); build it with `bash hack/build-k8s.sh`")
    argv = [
        str(helm), "template", RELEASE, str(chart or chart_dir()), "-n", namespace,
        "--show-only", GATE_POLICY_TEMPLATE,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SandboxError(f"helm template failed: {proc.stderr.strip() or proc.stdout.strip()}")
    docs = [doc for doc in yaml.safe_load_all(proc.stdout) if isinstance(doc, dict)]
    kinds = sorted(str(doc.get("kind")) for doc in docs)
    if kinds != sorted(POLICY_KINDS):
        raise SandboxError(f"{GATE_POLICY_TEMPLATE} rendered {kinds or 'nothing'}, not {' and '.join(POLICY_KINDS)}")
    return docs


def probe_pod() -> dict[str, Any]:
    """A GPU pod of a gang, as the policy gates it: created only as a server-side dry run."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gputopo-gate-probe", "labels": {"gputopo.io/gang": "gate-probe"}},
        "spec": {
            "containers": [
                {
                    "name": "probe",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def _gated(kubectl: Kubectl) -> bool:
    try:
        out = kubectl(
            "create", "-n", PROBE_NAMESPACE, "--dry-run=server", "-o", "json", "-f", "-",
            input=json.dumps(probe_pod()),
        )  # fmt: skip
        stored = json.loads(out)
    except (SandboxError, ValueError):
        return False
    return any(g.get("name") == GATE for g in stored.get("spec", {}).get("schedulingGates", []))


def enable_gating(kubectl: Kubectl, namespace: str) -> None:
    """Opt ``namespace`` into gating: the chart's policy gates its gangs' GPU pods from now on."""
    kubectl("label", "namespace", namespace, f"{GATING_LABEL}={GATING_ENABLED}", "--overwrite")


def install_gate_policy(kubectl: Kubectl, docs: list[dict[str, Any]], *, timeout: float) -> None:
    """Apply the rendered policy and binding and wait until the API server gates a gang's GPU pod with them."""
    enable_gating(kubectl, PROBE_NAMESPACE)
    kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=gputopo-sandbox", "-f", "-",
        input="\n---\n".join(json.dumps(doc) for doc in docs),
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not _gated(kubectl):
        if time.monotonic() > deadline:
            raise SandboxError(
                f"the placement-gate admission policy did not take effect within {timeout:.0f} s "
                f"(a dry-run GPU pod of a gang in {PROBE_NAMESPACE} got no {GATE} gate)"
            )
        time.sleep(0.5)
