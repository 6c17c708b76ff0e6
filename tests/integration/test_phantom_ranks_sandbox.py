"""A gang of bare pods holds no GPUs for ranks that do not exist, on the sandbox: one pod that declares a gang of
four is left Pending, saying so, until the other pods exist (no quota on GPUs in its namespace), or while its
namespace's ResourceQuota does not allow the GPUs of its ranks still to come."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.sandbox.harness import OperatorProcess, namespaced_operator
from gputopo.sandbox.testing import SandboxHandle

NS = "phantom-test"
GATE = "gputopo.io/placement"


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("phantom") / "operator.log"
    with namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, {}) as proc:
        yield proc


@pytest.fixture
def clean(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[None]:
    yield
    for kind in ("pods", "gangplacements", "resourcequotas"):
        sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)


def _pod(gang: str, size: int, rank: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{gang}-{rank}",
            "namespace": NS,
            "labels": {"gputopo.io/gang": gang, "gputopo.io/gang-size": str(size), "gputopo.io/rank": str(rank)},
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
        },
    }


def _status(sandbox: SandboxHandle, gang: str, phases: tuple[str, ...], said: str = "") -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        out = sandbox.kubectl("get", "gangplacement", f"gputopo-{gang}", "-n", NS, "-o", "json", "--ignore-not-found")
        status = (json.loads(out).get("status") or {}) if out.strip() else {}
        return status if status.get("phase") in phases and said in status.get("message", "") else None

    return dict(sandbox.wait_for(f"gang {gang} {phases}", reached, timeout=60))


def test_one_pod_declaring_four_ranks_holds_nothing_until_every_pod_exists(sandbox: SandboxHandle, clean: None) -> None:
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_pod("lone", 4, 0)))
    status = _status(sandbox, "lone", ("Pending",), "declares 4 ranks, 1 exist; its namespace has no quota")
    assert not status.get("ranks")
    for rank in (1, 2, 3):
        sandbox.kubectl("create", "-f", "-", input=json.dumps(_pod("lone", 4, rank)))
    planned = _status(sandbox, "lone", ("Planned", "Running"))
    assert sorted(r["rank"] for r in planned["ranks"]) == [0, 1, 2, 3]


def test_a_namespace_quota_bounds_the_gpus_held_for_ranks_still_to_come(sandbox: SandboxHandle, clean: None) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": NS},
        "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
    }
    sandbox.kubectl("create", "-f", "-", input=json.dumps(quota))

    def counted() -> bool:
        out = sandbox.kubectl("get", "resourcequota", "gpus", "-n", NS, "-o", "json")
        return "requests.nvidia.com/gpu" in ((json.loads(out).get("status") or {}).get("used") or {})

    sandbox.wait_for("quota counted", counted, timeout=60)
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_pod("capped", 4, 0)))
    status = _status(sandbox, "capped", ("Pending",), "declares 4 ranks, 1 exist; namespace quota allows 8 more GPUs")
    assert not status.get("ranks")
