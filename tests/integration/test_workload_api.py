"""The sandbox serves the Workload API of Kubernetes 1.37 and its Job controller makes a gang's PodGroup.

The sandbox enables GenericWorkload, WorkloadWithJob and TopologyAwareWorkloadScheduling on kube-apiserver,
kube-controller-manager and kube-scheduler, and serves scheduling.k8s.io/v1beta1 (see "What your cluster must
enable" in docs/install.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gputopo.sandbox.testing import SandboxHandle

NS = "workload-api-test"
JOB = "gang-of-two"


@pytest.fixture(scope="module")
def ns(sandbox: SandboxHandle) -> Any:
    sandbox.kubectl("create", "namespace", NS, check=False)
    yield NS
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def _owner(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((o for o in obj["metadata"].get("ownerReferences", []) if o["kind"] == kind), None)


def test_podgroups_and_workloads_are_served(sandbox: SandboxHandle) -> None:
    served = json.loads(sandbox.kubectl("get", "--raw", "/apis/scheduling.k8s.io/v1beta1"))
    names = {r["name"] for r in served["resources"]}
    assert {"podgroups", "workloads"} <= names


def test_gang_job_gets_a_podgroup_from_the_job_controller(sandbox: SandboxHandle, ns: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "rank", "image": "busybox"}],
                },
            },
        },
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(job))
    created = sandbox.get_json("job", JOB, "-n", ns)
    # Without WorkloadWithJob the API server refuses the field.
    assert created["spec"]["scheduling"]["schedulingPolicy"]["gang"]["minCount"] == 2

    def podgroup() -> dict[str, Any] | None:
        groups = sandbox.get_json("podgroups.v1beta1.scheduling.k8s.io", "-n", ns)["items"]
        return next((g for g in groups if (_owner(g, "Job") or {}).get("uid") == created["metadata"]["uid"]), None)

    group = sandbox.wait_for("the Job controller's PodGroup", podgroup, timeout=60)
    # kube-controller-manager's Job controller (pkg/controller/job/job_scheduling_manager.go) names the Workload
    # <job>-<hash of the Job's UID> and its one PodGroup <workload>-<job>-pgt-0-<hash>; the PodGroup's
    # controller is the Job, and the Workload owns it too.
    job_owner = _owner(group, "Job")
    assert job_owner is not None and job_owner["name"] == JOB and job_owner.get("controller") is True
    workload_name = group["spec"]["workloadRef"]["workloadName"]
    assert workload_name.startswith(f"{JOB}-")
    assert group["metadata"]["name"].startswith(f"{workload_name}-{JOB}-pgt-0-")
    assert (_owner(group, "Workload") or {}).get("name") == workload_name
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    workload = sandbox.get_json("workloads.v1beta1.scheduling.k8s.io", workload_name, "-n", ns)
    assert (_owner(workload, "Job") or {}).get("uid") == created["metadata"]["uid"]

    def pods() -> list[dict[str, Any]] | None:
        got = sandbox.get_json("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={JOB}")["items"]
        return got if len(got) == 2 and all(p["spec"].get("nodeName") for p in got) else None

    # The pods name their PodGroup, and the scheduler's GangScheduling plugin binds the gang once both exist.
    bound = sandbox.wait_for("both ranks bound", pods, timeout=60)
    assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in bound} == {group["metadata"]["name"]}
    sandbox.kubectl("delete", "job", JOB, "-n", ns, "--cascade=background", "--wait=false", check=False)
