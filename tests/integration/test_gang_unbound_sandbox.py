"""A gang kube-scheduler refuses to bind, on the sandbox's real kube-apiserver and kube-scheduler (1.37, with the
GenericWorkload gate): a PodGroup whose priority differs from its pods'. kube-scheduler refuses the whole group
("all pods in a single pod group should have the same priority as the pod group's priority"); its words reach the
gang's status while gputopo waits, and once the unbind timeout has passed the plan is let go, its GPUs free.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.sandbox.harness import OperatorProcess, namespaced_operator, priority_classes, wait_for
from gputopo.sandbox.testing import SandboxHandle

NS = "gangs-unbound"
GATE = "gputopo.io/placement"
TIMEOUT = 15  # GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS
PRIORITY = "same priority as the pod group's priority"


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("unbound") / "operator.log"
    settings = {"GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": str(TIMEOUT)}
    with (
        priority_classes(sandbox.kubectl, {"unbound-high": 100}),
        namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, settings) as proc,
    ):
        yield proc
        for kind in ("pods", "podgroups", "gangplacements"):
            sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)


def _get(sandbox: SandboxHandle, kind: str, name: str) -> dict[str, Any]:
    out = sandbox.kubectl("get", kind, name, "-n", NS, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else {}


def _pod(name: str) -> dict[str, Any]:
    container = {"name": "trainer", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    spec = {
        "restartPolicy": "Never",
        "priorityClassName": "unbound-high",  # the PodGroup names none: its priority is 0, theirs 100
        "schedulingGroup": {"podGroupName": "mismatch"},
        "schedulingGates": [{"name": GATE}],
        "containers": [container],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def test_a_podgroup_whose_priority_differs_from_its_pods_is_reported_then_let_go(
    sandbox: SandboxHandle, operator: OperatorProcess
) -> None:
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mismatch"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    items = [group, _pod("mismatch-0"), _pod("mismatch-1")]
    sandbox.kubectl(
        "create", "-n", NS, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )

    def status() -> dict[str, Any]:
        found: dict[str, Any] = _get(sandbox, "gangplacement", "podgroup-mismatch").get("status") or {}
        return found

    def said() -> dict[str, Any] | None:
        now = status()
        return now if now.get("phase") == "Planned" and PRIORITY in now.get("message", "") else None

    try:
        planned = wait_for("kube-scheduler's words in the gang's status", said, timeout=60, every=0.3)
        assert len(planned["ranks"]) == 2
        scheduled = _condition(_get(sandbox, "pod", "mismatch-0"), "PodScheduled")
        print("pod PodScheduled:", json.dumps(scheduled))
        print("PodGroup conditions:", json.dumps(_get(sandbox, "podgroup", "mismatch").get("status") or {}))
        print("gang while waiting:", planned["message"])
        assert scheduled.get("status") == "False" and scheduled.get("reason") == "SchedulerError"
        released = wait_for(
            "the plan let go", lambda: status() if status().get("phase") == "Released" else None, timeout=60, every=0.5
        )
        print("gang let go:", released["message"])
        assert not released.get("ranks") and "did not bind ranks 0, 1" in released["message"]
        assert PRIORITY in released["message"]
        events = json.loads(sandbox.kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
        assert "GangNotBound" in {e.get("reason") for e in events}
    except AssertionError:
        print(operator.log_tail(60))
        raise
