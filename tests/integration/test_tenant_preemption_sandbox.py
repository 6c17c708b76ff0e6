"""One tenant against another's running gangs, on the sandbox's real API server, scheduler and controller manager.

The tenant is a user with nothing but its own namespace's rights: a RoleBinding to the ``admin`` ClusterRole in
``TENANT`` (and ``TENANT_Q``), plus TrainingJobs and their status there (what a CRD aggregated to ``admin`` would
give it). Every write of the tenant goes through ``kubectl --as``. The other namespace (``OTHERS``) runs gangs of its
own. One operator watches the three with the settings a shared cluster would use: only ``OTHERS`` may preempt with
the high class, ``TENANT`` with the middle one, which its ResourceQuota (set by the admins) grants no pod; the
longest minimum runtime a workload may claim is a few seconds, the queue starves after one second, and ``TENANT_Q``
runs TrainingJobs only under Kueue's quota.

Each test confines its gangs to a free 8-GPU node, so the cluster is full for them alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gputopo.sandbox.harness import (
    Jobs,
    OperatorProcess,
    namespace_jobs,
    namespaced_operator,
    priority_classes,
    training_job,
)
from gputopo.sandbox.testing import SandboxHandle

OTHERS, TENANT, TENANT_Q = "tenancy-others", "tenancy-tenant", "tenancy-tenant-q"
USER = "tenancy-tenant-admin"
LOW, MID, HIGH = "gputopo-test-tenancy-low", "gputopo-test-tenancy-mid", "gputopo-test-tenancy-high"
CLASSES = {LOW: 100, MID: 500, HIGH: 1000}
QUIET_SECONDS = 15.0  # how long a victim must keep running to count as not preempted
SETTINGS = {
    "GPUTOPO_NAMESPACES": f"{OTHERS},{TENANT},{TENANT_Q}",
    "GPUTOPO_PREEMPTION_CLASSES": json.dumps({HIGH: [OTHERS], MID: [TENANT]}),
    "GPUTOPO_PREEMPTION_MAX_MIN_RUNTIME_SECONDS": "3",
    "GPUTOPO_STARVATION_SECONDS": "1",
    "GPUTOPO_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
    "GPUTOPO_KUEUE_MANAGED_JOBS_NAMESPACES": TENANT_Q,
}


def _tenant_rights(namespace: str) -> list[dict[str, Any]]:
    meta = {"name": USER, "namespace": namespace}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{USER}-admin", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {
                    "apiGroups": ["gputopo.io"],
                    "resources": ["trainingjobs", "trainingjobs/status"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("tenancy") / "operator.log"
    for namespace in (TENANT, TENANT_Q):
        sandbox.kubectl("create", "namespace", namespace, check=False)
    rights: list[dict[str, Any]] = [r for ns in (TENANT, TENANT_Q) for r in _tenant_rights(ns)]
    rights.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-mid-class", "namespace": TENANT},
            "spec": {
                "hard": {"pods": "0"},
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [MID]}]
                },
            },
        }
    )
    sandbox.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rights}))
    try:
        with (
            priority_classes(sandbox.kubectl, CLASSES),
            namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, OTHERS, SETTINGS) as proc,
        ):
            yield proc
    finally:
        for namespace in (TENANT, TENANT_Q):
            sandbox.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def as_tenant(sandbox: SandboxHandle) -> Callable[..., str]:
    def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
        return sandbox.kubectl(f"--as={USER}", *args, input=input, check=check)

    return kubectl


@pytest.fixture
def others(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(sandbox.kubectl, OTHERS, operator) as handle:
        yield handle


@pytest.fixture
def tenant(sandbox: SandboxHandle, operator: OperatorProcess, others: Jobs) -> Iterator[Jobs]:
    with namespace_jobs(as_tenant(sandbox), TENANT, operator) as handle:
        yield handle


def confined(name: str, namespace: str, node: str, **spec: Any) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "trainer", "image": "pytorch"}],
        }
    }
    return training_job(name, namespace, gpusPerWorker=8, template=template, **spec)


def running_on(jobs: Jobs, name: str) -> None:
    jobs.wait_phase(name, "Running", timeout=90)
    jobs.wait_running_pods(name, 1, timeout=90)


def keeps_running(jobs: Jobs, name: str, seconds: float = QUIET_SECONDS) -> None:
    """The job stays Running, its pod undeleted and not Preempted, for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        preempted = jobs.condition(name, "Preempted")
        assert not (preempted and preempted["status"] == "True"), preempted
        assert jobs.status(name).get("phase") == "Running", jobs.status(name)
        assert not [p for p in jobs.pods(name) if p["metadata"].get("deletionTimestamp")]
        time.sleep(0.5)


def test_the_tenant_is_a_namespace_admin_and_nothing_more(sandbox: SandboxHandle, operator: OperatorProcess) -> None:
    def can(verb: str, resource: str, namespace: str) -> bool:
        out = sandbox.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={USER}", check=False)
        return out.strip() == "yes"

    assert can("create", "pods", TENANT) and can("patch", "trainingjobs.gputopo.io/status", TENANT)
    assert not can("create", "pods", OTHERS) and not can("patch", "trainingjobs.gputopo.io", OTHERS)
    assert not can("create", "priorityclasses", TENANT)


def test_a_class_the_operator_does_not_list_for_the_namespace_preempts_nobody(
    sandbox: SandboxHandle, others: Jobs, tenant: Jobs
) -> None:
    """The tenant names the high class in spec.priorityClassName (no admission checks a custom resource's class)."""
    node = sandbox.free_gpu_nodes(1)[0]
    others.apply(confined("victim", OTHERS, node, priorityClassName=LOW))
    running_on(others, "victim")
    tenant.apply(confined("grab", TENANT, node, priorityClassName=HIGH))
    keeps_running(others, "victim")
    assert "nomination" not in tenant.status("grab")


def test_a_class_the_namespaces_quota_forbids_preempts_nobody(
    sandbox: SandboxHandle, others: Jobs, tenant: Jobs
) -> None:
    """The middle class may preempt in the tenant's namespace, but its quota grants that class no pod: the dry run
    of one rank's pod is refused, so nobody is preempted for pods that would be refused after."""
    node = sandbox.free_gpu_nodes(1)[0]
    others.apply(confined("victim", OTHERS, node, priorityClassName=LOW))
    running_on(others, "victim")
    tenant.apply(confined("grab", TENANT, node, priorityClassName=MID))

    def refused() -> str | None:
        placed = tenant.condition("grab", "Placed")
        message = str(placed.get("message", "")) if placed else ""
        return message if "the API server would refuse its pods" in message else None

    message = tenant.wait("the tenant's job told its pods would be refused", refused, timeout=60)
    assert "exceeded quota" in message or "forbidden" in message
    keeps_running(others, "victim")
    assert "nomination" not in tenant.status("grab")


def test_the_deprecated_priority_preempts_nobody(sandbox: SandboxHandle, others: Jobs, tenant: Jobs) -> None:
    """spec.priority needs no PriorityClass: it may not lift the tenant's job over another namespace's."""
    node = sandbox.free_gpu_nodes(1)[0]
    others.apply(confined("victim", OTHERS, node, priorityClassName=LOW))
    running_on(others, "victim")
    tenant.apply(confined("grab", TENANT, node, priority=1000))
    keeps_running(others, "victim")
    assert "nomination" not in tenant.status("grab")


def test_a_job_that_fits_no_node_freezes_no_other_namespace(sandbox: SandboxHandle, others: Jobs, tenant: Jobs) -> None:
    """The tenant's high job asks for a label no node has; past the starvation time it holds back nobody."""
    node = sandbox.free_gpu_nodes(1)[0]
    nowhere = {"spec": {"nodeSelector": {"gputopo.io/no-such-pool": "x"}, "containers": [{"name": "t", "image": "t"}]}}
    tenant.apply(training_job("stuck", TENANT, gpusPerWorker=8, template=nowhere, priorityClassName=HIGH))

    def said() -> str | None:
        placed = tenant.condition("stuck", "Placed")
        message = str(placed.get("message", "")) if placed else ""
        return message if message.startswith("cannot fit even the empty cluster") else None

    tenant.wait("stuck told it fits no cluster", said, timeout=60)
    time.sleep(2.0)  # past the starvation time
    others.apply(confined("small", OTHERS, node, priorityClassName=LOW))
    running_on(others, "small")


def test_a_workload_cannot_opt_out_of_preemption(sandbox: SandboxHandle, others: Jobs, tenant: Jobs) -> None:
    """The tenant's job says it is not preemptible and claims a year of minimum runtime: the other namespace's
    high job (its class listed for that namespace) still preempts it, once the cluster's longest minimum runtime
    (3 s here) is over."""
    node = sandbox.free_gpu_nodes(1)[0]
    terms = {"preemptible": False, "minRuntimeSeconds": 31_536_000}
    tenant.apply(confined("mine", TENANT, node, priorityClassName=LOW, preemption=terms))
    running_on(tenant, "mine")
    others.apply(confined("urgent", OTHERS, node, priorityClassName=HIGH))

    def preempted() -> dict[str, Any] | None:
        condition = tenant.condition("mine", "Preempted")
        return condition if condition and condition["status"] == "True" else None

    condition = tenant.wait("the tenant's job preempted", preempted, timeout=90)
    # Named by UID, not by the other tenant's namespace and name.
    assert OTHERS not in condition["message"] and "UID " in condition["message"]
    running_on(others, "urgent")


def test_a_forged_nomination_ends_nobody(sandbox: SandboxHandle, others: Jobs, tenant: Jobs) -> None:
    """The tenant writes a nomination naming the other namespace's running job into its own job's status."""
    node = sandbox.free_gpu_nodes(1)[0]
    others.apply(confined("victim", OTHERS, node, priorityClassName=LOW))
    running_on(others, "victim")
    tenant.apply(confined("forger", TENANT, node, priorityClassName=HIGH))
    tenant.wait("forger queued", lambda: tenant.condition("forger", "Placed"), timeout=60)
    nomination = {"gpus": [{"node": node, "gpus": list(range(8))}], "victims": [f"{OTHERS}/victim"], "domain": node}
    patch = json.dumps({"status": {"nomination": nomination}})
    as_tenant(sandbox)(
        "patch", "trainingjob", "forger", "-n", TENANT, "--subresource=status", "--type=merge", "-p", patch
    )
    keeps_running(others, "victim")


def test_leaving_the_queue_name_off_does_not_skip_kueues_quota(
    sandbox: SandboxHandle, operator: OperatorProcess
) -> None:
    with namespace_jobs(as_tenant(sandbox), TENANT_Q, operator) as jobs:
        node = sandbox.free_gpu_nodes(1)[0]
        jobs.apply(confined("unqueued", TENANT_Q, node, priorityClassName=LOW))

        def waiting() -> dict[str, Any] | None:
            placed = jobs.condition("unqueued", "Placed")
            return placed if placed and placed.get("reason") == "WaitingForQueueName" else None

        placed = jobs.wait("the unqueued job waiting for a queue name", waiting, timeout=60)
        assert "kueue.x-k8s.io/queue-name" in placed["message"]
        time.sleep(3.0)
        assert not jobs.pods("unqueued") and jobs.status("unqueued").get("phase") == "Pending"
