"""An NVL72 sandbox (``--profile nvl72``): fake GB200 trays whose GPUs report their rack's NVLink fabric through
the fake NVML, published by the real probe code to a real kube-apiserver; fabric faults travel the same path,
and the operator places gangs on the racks and moves them off a degraded tray. Nothing here is mocked. The
module brings up its own sandbox (two racks of 18 trays under one leaf)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.api.labels import LABEL_GFD_CLIQUE, LABEL_HEALTH, LABEL_NVLINK_CLIQUE
from gputopo.sandbox.faults import fabric_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, namespaced_operator, training_job
from gputopo.sandbox.profiles import domain_fabric, plan_nodes
from gputopo.sandbox.testing import SandboxHandle, running_sandbox

pytestmark = pytest.mark.integration

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test") + "-nvl72"
NS = "nvl72-test"
FAST = {"backoffSeconds": 0, "gracePeriodSeconds": 0, "cooldownSeconds": 0}
NODES = 36
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def racks() -> Iterator[SandboxHandle]:
    with running_sandbox(NAME, nodes=NODES, profile="nvl72") as handle:
        yield handle


@pytest.fixture(scope="module")
def operator(racks: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("nvl72") / "operator.log"
    with namespaced_operator(racks.kubectl, racks.kubeconfig, log_file, NS, {}) as proc:
        yield proc


@pytest.fixture
def jobs(racks: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(racks.kubectl, NS, operator) as handle:
        yield handle


def _rack_of(node: str) -> str:
    return next(p.nvlink_domain for p in plan_nodes("nvl72", NODES) if p.name == node)


def _labels(racks: SandboxHandle, node: str) -> dict[str, str]:
    out: dict[str, str] = racks.get_json("node", node)["metadata"]["labels"]
    return out


def _clique(rack: str) -> str:
    cluster_uuid, clique = domain_fabric(rack)
    return f"{cluster_uuid}.{clique}"


def test_every_tray_publishes_its_racks_clique(racks: SandboxHandle) -> None:
    plans = {p.name: p for p in plan_nodes("nvl72", NODES)}
    for node in racks.nodes:
        expected = _clique(plans[node].nvlink_domain)
        status = racks.get_json("nodetopology", node)["status"]
        assert status["system"]["nvlinkDomain"] == {"clique": expected, "health": "Healthy", "reason": ""}
        assert {g["fabric"]["state"] for g in status["gpus"]} == {"Completed"}
        labels = _labels(racks, node)
        assert labels[LABEL_NVLINK_CLIQUE] == labels[LABEL_GFD_CLIQUE] == expected


def test_a_rack_that_loses_a_switch_tray_reads_degraded_on_every_tray(racks: SandboxHandle) -> None:
    first = racks.nodes[0]
    changed = fabric_fault(racks.sandbox, first, "degraded", whole_domain=True)
    try:
        assert len(changed) == 18 and first in changed
        other_rack = [n for n in racks.nodes if n not in changed]

        def all_degraded() -> bool:
            return all(_labels(racks, n).get(LABEL_HEALTH) == "degraded" for n in changed)

        racks.wait_for("every tray of the rack degraded", all_degraded, timeout=TIMEOUT)
        status = racks.get_json("nodetopology", first)["status"]
        assert status["system"]["nvlinkDomain"]["health"] == "Degraded"
        assert "bandwidth degraded" in status["system"]["nvlinkDomain"]["reason"]
        assert all(_labels(racks, n)[LABEL_HEALTH] == "healthy" for n in other_rack)
    finally:
        fabric_fault(racks.sandbox, first, "up", whole_domain=True)
    racks.wait_for(
        "the rack healed",
        lambda: all(_labels(racks, n).get(LABEL_HEALTH) == "healthy" for n in changed),
        timeout=TIMEOUT,
    )


def test_gfds_clique_label_is_never_overwritten(racks: SandboxHandle) -> None:
    node = racks.nodes[-1]
    gfd_value = "gfd-clique.7"
    # Another field manager (GPU Feature Discovery, here kubectl) owns nvidia.com/gpu.clique.
    racks.kubectl("label", "--overwrite", "node", node, f"{LABEL_GFD_CLIQUE}={gfd_value}")
    fabric_fault(racks.sandbox, node, "degraded")  # a label change makes the probe apply its labels again
    try:

        def deferred() -> Any:
            labels = _labels(racks, node)
            return labels.get(LABEL_HEALTH) == "degraded" and labels.get(LABEL_NVLINK_CLIQUE) == gfd_value

        racks.wait_for("the probe to read GFD's clique", deferred, timeout=TIMEOUT)
        assert _labels(racks, node)[LABEL_GFD_CLIQUE] == gfd_value
    finally:
        fabric_fault(racks.sandbox, node, "up")


def test_a_gang_larger_than_the_cap_splits_evenly_over_two_racks(racks: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("wide", NS, workers=20, gpusPerWorker=4, topology={"sliceSize": 10}))
    jobs.wait_running_pods("wide", 20, timeout=120)
    workers = jobs.status("wide")["placement"]["workers"]
    order = [_rack_of(w["node"]) for w in sorted(workers, key=lambda w: w["rank"])]
    assert order.count("rack-00") == order.count("rack-01") == 10, "16 of 18 trays at most: 10 + 10"
    assert order == sorted(order), "each rack's ranks are contiguous"
    assert len({w["node"] for w in workers}) == 20, "one 4-GPU worker per tray"


def test_a_degraded_tray_moves_the_gang_on_it(racks: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("rack-gang", NS, workers=4, gpusPerWorker=4, failurePolicy=FAST))
    jobs.wait_running_pods("rack-gang", 4, timeout=120)
    before = {w["node"] for w in jobs.status("rack-gang")["placement"]["workers"]}
    assert len({_rack_of(n) for n in before}) == 1, "a gang that fits stays in one rack"
    victim = sorted(before)[0]
    fabric_fault(racks.sandbox, victim, "degraded")
    try:
        jobs.wait("restart counted", lambda: jobs.status("rack-gang").get("restarts", 0) >= 1, timeout=TIMEOUT)
        jobs.wait_running_pods("rack-gang", 4, timeout=120)
        after = {w["node"] for w in jobs.wait_phase("rack-gang", "Running")["placement"]["workers"]}
        assert victim not in after and len({_rack_of(n) for n in after}) == 1
        assert any(e.get("reason") == "NvlinkFabricDegraded" for e in jobs.events("rack-gang"))
    finally:
        fabric_fault(racks.sandbox, victim, "up")
