"""The operator itself, run with a token of its own ServiceAccount under the chart's RBAC (watching one namespace:
its writes bound there by a RoleBinding) and both of its admission policies, on the sandbox's real API server: it
still does its work. A TrainingJob is placed and runs (pods created with their TrainingJob's owner reference, the
status written), and a foreign gang, an Indexed Job whose pods carry gputopo's gate, is planned whole (its
GangPlacement written) and each rank steered onto its plan (the gate lifted, node affinity and annotations set).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tenant_helpers import RELEASE, apply, delete, release_docs

from gputopo.gangs.model import GATE
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, namespaced_operator, training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "tenancy-operator"
SA = f"{RELEASE}-operator"
POLICIES = {f"{RELEASE}-operator-state", f"{RELEASE}-operator-limits"}
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_objects() -> list[dict[str, Any]]:
    """The operator's ServiceAccount, RBAC and both policies, for a release in NS that watches only NS."""
    docs = release_docs("--set", f"operator.config.namespaces={{{NS}}}", namespace=NS)
    wanted = [
        d for d in docs
        if (d["kind"] in KINDS and d["metadata"]["name"].startswith(f"{RELEASE}-operator"))
        or (d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] in POLICIES)
    ]  # fmt: skip
    for d in wanted:
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            d["metadata"].setdefault("namespace", NS)
    return wanted


def token_kubeconfig(sandbox: SandboxHandle, token: str, path: Path) -> Path:
    """The sandbox's kubeconfig with its user's credentials replaced by ``token``."""
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    sandbox.kubectl("create", "namespace", NS, check=False)
    objects = chart_objects()
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted([*KINDS, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]), kinds
    apply(sandbox, objects)
    token = sandbox.kubectl("create", "token", SA, "-n", NS, "--duration", "2h").strip()
    here = tmp_path_factory.mktemp("operator-sa")
    kubeconfig = token_kubeconfig(sandbox, token, here / "kubeconfig")
    settings = {"GPUTOPO_GANG_ARRIVAL_TIMEOUT_SECONDS": "12", "GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "20"}
    try:
        with namespaced_operator(sandbox.kubectl, kubeconfig, here / "operator.log", NS, settings) as proc:
            yield proc
    finally:
        delete(sandbox, [o for o in objects if o["kind"] not in ("ServiceAccount", "Role", "RoleBinding")])


@pytest.fixture
def jobs(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(sandbox.kubectl, NS, operator) as handle:
        yield handle


def test_a_trainingjob_is_placed_and_runs_with_the_operators_own_rights(jobs: Jobs, operator: OperatorProcess) -> None:
    jobs.apply(training_job("tj", NS, workers=2, gpusPerWorker=4))
    try:
        jobs.wait_phase("tj", "Running", timeout=90)
    except AssertionError:
        print(operator.log_tail(60))
        raise
    pods = jobs.pods("tj")
    assert len(pods) == 2
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "TrainingJob" and owner["controller"] is True
    assert "Forbidden" not in operator.log_tail(200)


def _indexed_job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 6,
            "template": {"spec": {
                "restartPolicy": "Never", "schedulingGates": [{"name": GATE}],
                "containers": [{"name": "trainer", "image": "pytorch",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            }},
        },
    }  # fmt: skip


def test_a_foreign_gang_is_planned_and_steered_with_the_operators_own_rights(
    sandbox: SandboxHandle, jobs: Jobs, operator: OperatorProcess
) -> None:
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(_indexed_job("idx", 2, 4)))
    try:

        def steered() -> list[dict[str, Any]] | None:
            pods = sandbox.get_json("pods", "-n", NS, "-l", "job-name=idx")["items"]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            return pods if len(pods) == 2 and len(bound) == 2 else None

        pods = sandbox.wait_for("both ranks of the Indexed Job steered and bound", steered, timeout=90, every=0.5)
        for pod in pods:
            assert not [g for g in pod["spec"].get("schedulingGates") or [] if g["name"] == GATE]
            assert pod["metadata"]["annotations"]["gputopo.io/gpus"]
        record = sandbox.get_json("gangplacement", "job-idx", "-n", NS)
        assert sorted(r["rank"] for r in record["status"]["ranks"]) == [0, 1]
    except AssertionError:
        print(operator.log_tail(60))
        raise
    finally:
        sandbox.kubectl("delete", "job", "idx", "-n", NS, "--wait=false", "--cascade=foreground", check=False)
