"""``kubectl gputopo explain`` and ``status`` on the sandbox: a test per pending reason the operator gives a
TrainingJob there (the output checked, as text and as JSON), a running job with a fault under it, and ``status``
against the sandbox's known layout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from explain_cli import explained, kubectl_gputopo

from gputopo.sandbox.faults import link_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, namespaced_operator, training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "explain-test"
TIER0 = "fabric.topograph.run/tier-0"
TIER1 = "fabric.topograph.run/tier-1"


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("explain") / "operator.log"
    # A gang of bare pods is planned before all its pods exist (its ranks still to come are explained).
    settings = {"GPUTOPO_GANG_PHANTOM_HEADROOM_RANKS": "8"}
    with namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, settings) as proc:
        yield proc


@pytest.fixture
def jobs(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(sandbox.kubectl, NS, operator) as handle:
        yield handle


def _placed_reason(jobs: Jobs, name: str, reason: str) -> dict[str, Any]:
    def said() -> dict[str, Any] | None:
        found = jobs.condition(name, "Placed")
        return found if found is not None and found["reason"] == reason else None

    found: dict[str, Any] = jobs.wait(f"{name} Placed={reason}", said, timeout=60)
    return found


def _text(sandbox: SandboxHandle, name: str) -> str:
    run = kubectl_gputopo(sandbox, "explain", name, "-n", NS)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_topology_placement_failed_names_the_closest_leaves_and_preemption(sandbox: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("huge", NS, workers=12, gpusPerWorker=8, topology={"interNode": {"requiredTier": 0}}))
    _placed_reason(jobs, "huge", "Unplaceable")
    doc = explained(sandbox, NS, "huge")
    assert doc["pending"] is True and doc["phase"] == "Pending"
    assert [r["reason"] for r in doc["reasons"]] == ["TopologyPlacementFailed"]
    assert "under one tier-0 switch" in doc["reasons"][0]["message"]
    leaves = {
        "/".join(v for v in (n["metadata"]["labels"].get(TIER1), n["metadata"]["labels"].get(TIER0)) if v)
        for n in sandbox.get_json("nodes")["items"]
    }
    assert doc["shortfall"] and {s["domain"] for s in doc["shortfall"]} <= leaves
    assert all(s["workersNeeded"] == 12 and s["workerSlots"] < 12 for s in doc["shortfall"])
    assert doc["preemption"]["possible"] is False
    text = _text(sandbox, "tj/huge")
    print(f"$ kubectl gputopo explain tj/huge -n {NS}\n{text}")
    assert text.startswith(f"TrainingJob {NS}/huge: Pending\nPending because (first to fix first):\n")
    assert "  1. TopologyPlacementFailed: cannot fit even the empty cluster: needs 12 nodes with 8 free" in text
    assert "Closest domains:\n" in text and doc["shortfall"][0]["words"] in text
    assert "Preemption: none would help" in text


def test_misconfigured_names_the_field(sandbox: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("typo", NS, priorityClassName="no-such-class"))
    _placed_reason(jobs, "typo", "InvalidSpec")
    doc = explained(sandbox, NS, "typo")
    assert [r["reason"] for r in doc["reasons"]] == ["Misconfigured"]
    assert doc["shortfall"] == [] and doc["preemption"] is None
    assert "spec.priorityClassName" in doc["reasons"][0]["message"] and "no-such-class" in doc["reasons"][0]["message"]
    text = _text(sandbox, "typo")
    print(f"$ kubectl gputopo explain typo -n {NS}\n{text}")
    assert "  1. Misconfigured: spec.priorityClassName" in text


def test_a_queue_without_kueue_is_misconfigured(sandbox: SandboxHandle, jobs: Jobs) -> None:
    body = training_job("queued", NS)
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    jobs.apply(body)
    _placed_reason(jobs, "queued", "KueueNotInstalled")
    doc = explained(sandbox, NS, "queued")
    assert [(r["reason"], r["message"]) for r in doc["reasons"]] == [
        ("Misconfigured", "waiting for Kueue's Workload API to be served")
    ]


def test_a_running_job_shows_where_it_sits_and_a_link_down_under_it(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = sandbox.free_gpu_nodes(1)[0]
    template = {
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "trainer", "image": "pytorch"}],
        }
    }
    jobs.apply(training_job("steady", NS, template=template, failurePolicy={"onLinkFailure": "Tolerate"}))
    status = jobs.wait_phase("steady", "Running", timeout=90)
    doc = explained(sandbox, NS, "steady")
    assert doc["pending"] is False and doc["reasons"] == []
    assert doc["placement"]["workers"] == [
        {"rank": 0, "node": node, "gpus": list(range(8)), "nics": doc["placement"]["workers"][0]["nics"]}
    ]
    assert doc["placement"]["busBandwidthGBps"] == status["placement"]["estimatedBusBandwidthGBps"]
    assert doc["faults"] == []
    link_fault(sandbox.sandbox, node, 0, 1, "down")
    try:
        faulted = jobs.wait(
            "the link down under steady",
            lambda: (d := explained(sandbox, NS, "steady"))["faults"] and d,
            timeout=60,
        )
        assert faulted["faults"] == [{"node": node, "part": "link 0-1", "state": "Down"}]
        assert f"Links, NICs and GPUs under it: {node} link 0-1 Down" in _text(sandbox, "steady")
    finally:
        link_fault(sandbox.sandbox, node, 0, 1, "up")


def test_status_against_the_sandbox_layout(sandbox: SandboxHandle, jobs: Jobs) -> None:
    node = sandbox.free_gpu_nodes(1)[0]
    template = {"spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "t", "image": "x"}]}}
    jobs.apply(training_job("sized", NS, gpusPerWorker=4, template=template))
    jobs.wait_phase("sized", "Running", timeout=90)
    jobs.apply(training_job("huge", NS, workers=12, gpusPerWorker=8, topology={"interNode": {"requiredTier": 0}}))
    _placed_reason(jobs, "huge", "Unplaceable")
    run = kubectl_gputopo(sandbox, "status", "-o", "json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    topologies = {t["metadata"]["name"]: len(t["status"]["gpus"]) for t in sandbox.get_json("nodetopology")["items"]}
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sandbox.get_json("nodes")["items"]}
    expected: dict[str, tuple[int, int]] = {}
    for name, gpus in topologies.items():
        leaf = f"{labels[name][TIER1]}/{labels[name][TIER0]}"
        nodes, total = expected.get(leaf, (0, 0))
        expected[leaf] = (nodes + 1, total + gpus)
    assert {d["domain"]: (d["nodes"], d["gpus"]) for d in doc["domains"]} == expected
    assert doc["totals"]["gpus"] == sum(topologies.values())
    leaf = f"{labels[node][TIER1]}/{labels[node][TIER0]}"
    mine = next(d for d in doc["domains"] if d["domain"] == leaf)
    assert f"{NS}/sized" in mine["gangs"] and mine["usedGpus"] >= 4
    assert doc["pendingByReason"].get("TopologyPlacementFailed", 0) >= 1
    assert {"kind": "TrainingJob", "name": f"{NS}/huge", "reason": "TopologyPlacementFailed"}.items() <= next(
        p for p in doc["pending"] if p["name"] == f"{NS}/huge"
    ).items()
    text = kubectl_gputopo(sandbox, "status")
    print(f"$ kubectl gputopo status\n{text.stdout}")
    assert text.returncode == 0 and text.stdout.startswith("DOMAIN ")
    assert f"TopologyPlacementFailed        TrainingJob {NS}/huge: " in text.stdout


def test_an_unknown_name_is_one_line_and_exit_2(sandbox: SandboxHandle) -> None:
    run = kubectl_gputopo(sandbox, "explain", "nobody", "-n", NS)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().endswith(f"no TrainingJob or gang 'nobody' in namespace '{NS}'")


GATE = "gputopo.io/placement"


def _gang_pod(name: str, gang: str, size: int, rank: int, gates: list[str]) -> dict[str, Any]:
    """A pod of a gang of bare pods, as the chart's admission policy leaves it: gputopo's gate (and others)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"gputopo.io/gang": gang, "gputopo.io/gang-size": str(size), "gputopo.io/rank": str(rank)},
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": g} for g in gates],
            "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
        },
    }


@pytest.fixture
def bare_pods(sandbox: SandboxHandle, jobs: Jobs) -> Iterator[None]:
    yield
    for kind in ("pods", "gangplacements"):
        sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)


def _gang_phase(sandbox: SandboxHandle, name: str, phase: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        out = sandbox.kubectl("get", "gangplacement", name, "-n", NS, "-o", "json", "--ignore-not-found")
        found: dict[str, Any] | None = json.loads(out) if out.strip() else None
        return found if found is not None and (found.get("status") or {}).get("phase") == phase else None

    return dict(sandbox.wait_for(f"gang {name} {phase}", reached, timeout=60))


def test_a_gang_behind_another_schedulers_gate_waits_for_other_gates(sandbox: SandboxHandle, bare_pods: None) -> None:
    sandbox.kubectl(
        "create", "-f", "-", input=json.dumps(_gang_pod("held-0", "held", 1, 0, ["kueue.x-k8s.io/admission", GATE]))
    )
    _gang_phase(sandbox, "gputopo-held", "Pending")
    doc = explained(sandbox, NS, "gang/gputopo-held")
    assert doc["kind"] == "GangPlacement" and doc["pending"] is True
    assert [(r["reason"], r["message"]) for r in doc["reasons"]] == [
        ("WaitingForOtherGates", "waiting for kueue.x-k8s.io/admission to be removed before planning")
    ]
    text = _text(sandbox, "gang/gputopo-held")
    print(f"$ kubectl gputopo explain gang/gputopo-held -n {NS}\n{text}")
    assert "  1. WaitingForOtherGates: waiting for kueue.x-k8s.io/admission" in text


def test_a_gang_with_ranks_still_to_come_waits_for_ranks(sandbox: SandboxHandle, bare_pods: None) -> None:
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_gang_pod("half-0", "half", 2, 0, [GATE])))
    _gang_phase(sandbox, "gputopo-half", "Planned")
    doc = explained(sandbox, NS, "gputopo/half")  # the gang's own <source>/<name> names it too
    assert doc["pending"] is True
    assert [r["reason"] for r in doc["reasons"]] == ["WaitingForRanks"]
    assert doc["reasons"][0]["message"].startswith("waiting for ranks 1 to be created")
    assert [w["rank"] for w in doc["placement"]["workers"]] == [0, 1]  # the plan holds both ranks' GPUs
