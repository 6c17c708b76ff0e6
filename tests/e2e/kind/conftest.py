"""The kind cluster of the end-to-end test, built from this machine's own images, and the chart installed on it
the way docs/install.md tells a user (only the image and fake-mode values differ).

Needs a Docker engine and the images of hack/build-kind-node.sh, which `make e2e` and `make test` provide; they
set GPUTOPO_REQUIRE_KIND=1, and then anything missing is a failure. A plain `pytest tests` skips these tests
with the reason: they take minutes, need root, and share one cluster name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # kind_cluster

from kind_cluster import (
    CLUSTER,
    EVERY,
    FAULT_DIR,
    HERE,
    IMAGES,
    NODE_IMAGE,
    NS,
    RELEASE,
    ROOT,
    TAG,
    TIMINGS,
    TOPOLOGY_LABEL,
    Kind,
    run,
    tool,
    unavailable,
)

from gputopo.sandbox.testing import wait_for


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kind)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.section("kind e2e timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")


# Module-scoped: the five nodes go as soon as the kind tests end, before the sandbox tests of the same run.
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    if os.environ.get("GPUTOPO_REQUIRE_KIND") != "1":
        pytest.skip("kind e2e runs with `make e2e` or `make test` (GPUTOPO_REQUIRE_KIND=1)")
    reason = unavailable()
    if reason:
        pytest.fail(f"kind e2e cannot run: {reason}")
    kind = str(tool("kind"))
    for image in IMAGES:
        if subprocess.run(["docker", "image", "inspect", f"{image}:{TAG}"], capture_output=True).returncode != 0:
            run("bash", str(ROOT / "hack" / "build-images.sh"), TAG, timeout=1800)
            break
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    subprocess.run([kind, "delete", "cluster", "--name", CLUSTER], capture_output=True)
    t0 = time.monotonic()
    run(kind, "create", "cluster", "--name", CLUSTER, "--image", NODE_IMAGE, "--config", str(HERE / "kind-config.yaml"),
        "--kubeconfig", str(kubeconfig), "--wait", "240s")  # fmt: skip
    try:
        k = Kind(kubeconfig)
        wait_for("every node Ready", lambda: _all_ready(k), timeout=240, every=EVERY)
        wait_for("CoreDNS and kind-net running", lambda: _kube_system_running(k), timeout=240, every=EVERY)
        TIMINGS["kind create cluster (5 nodes) until kube-system runs"] = time.monotonic() - t0
        t0 = time.monotonic()
        run(kind, "load", "docker-image", *(f"{image}:{TAG}" for image in IMAGES), "--name", CLUSTER)
        TIMINGS["kind load of the three images"] = time.monotonic() - t0
        yield k
    finally:
        if os.environ.get("GPUTOPO_KEEP_KIND") != "1":
            subprocess.run([kind, "delete", "cluster", "--name", CLUSTER], capture_output=True)


def _all_ready(k: Kind) -> bool:
    nodes = k.get("nodes")["items"]
    return len(nodes) == 5 and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])) for n in nodes
    )


def _kube_system_running(k: Kind) -> bool:
    pods = k.get("pods", "-n", "kube-system")["items"]
    wanted = [p for p in pods if p["metadata"]["name"].startswith(("coredns", "kind-net"))]
    return len(wanted) >= 7 and all(p["status"].get("phase") == "Running" for p in wanted)


@pytest.fixture(scope="module")
def installed(cluster: Kind) -> Kind:
    """The chart, installed as docs/install.md says; the probe fakes each worker's labelled topology."""
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=privileged")
    # The jobs' namespace opts into gating (gangs.optIn), so its Indexed Jobs and PodGroups are placed whole.
    cluster.kubectl("label", "namespace", "default", "gputopo.io/gating=enabled", "--overwrite")
    t0 = time.monotonic()
    cluster.helm(
        "install", RELEASE, str(ROOT / "charts" / "gputopo"), "-n", NS, "--wait", "--timeout", "5m",
        "--set", "operator.image.repository=gputopo-operator", "--set", f"operator.image.tag={TAG}",
        "--set", "operator.image.pullPolicy=Never",
        "--set", "probe.image.repository=gputopo-probe", "--set", f"probe.image.tag={TAG}",
        "--set", "probe.image.pullPolicy=Never",
        "--set", "probe.fake=hgx-h100", "--set", "probe.testCluster=true",
        "--set", f"probe.fakeTopologyLabel={TOPOLOGY_LABEL}",
        "--set", "probe.fakeAllocation=kubelet",
        "--set", "probe.intervalSeconds=1",
        "--set", f"probe.extraArgs={{--fault-dir={FAULT_DIR}}}",
        "--set", "operator.config.unschedulableTimeoutSeconds=60",
    )  # fmt: skip
    workers = cluster.workers()

    def published() -> bool:
        items = cluster.get("nodetopologies")["items"]
        return {i["metadata"]["name"] for i in items if i.get("status", {}).get("gpus")} >= set(workers)

    def advertised() -> bool:
        nodes = cluster.get("nodes", "-l", "nvidia.com/gpu.present=true")["items"]
        return all(n["status"].get("allocatable", {}).get("nvidia.com/gpu") == "8" for n in nodes)

    wait_for("a NodeTopology from the probe on each worker", published, timeout=180, every=EVERY)
    wait_for("each kubelet to advertise the probe's 8 fake GPUs", advertised, timeout=120, every=EVERY)
    TIMINGS["helm install until every worker is published and advertises its GPUs"] = time.monotonic() - t0
    return cluster
