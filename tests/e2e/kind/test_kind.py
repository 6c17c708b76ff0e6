"""End to end on kind: the images, the chart, a TrainingJob and a link failure on a real cluster.

Needs a Docker engine and kind; skipped otherwise. See README.md in this directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.sandbox.binaries import KUBE_VERSION, cache_root
from gputopo.sandbox.testing import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

ROOT = Path(__file__).parents[3]
HERE = Path(__file__).parent
CLUSTER = "gputopo-e2e"
NS = "gputopo-system"
RELEASE = "gputopo"
TAG = "e2e"
GPUS_PER_NODE = 8
FAULT_DIR = "/tmp/gputopo-faults"  # the probe's writable scratch dir (an emptyDir in the chart)
EVERY = 2.0  # seconds between polls of the kind cluster


def tool(name: str) -> str | None:
    cached = cache_root() / f"k8s-{KUBE_VERSION}" / "bin" / name
    return str(cached) if cached.is_file() else shutil.which(name)


def docker_works() -> str | None:
    """None when a Docker engine answers; otherwise why the test cannot run."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no Docker engine (docker info: {probe.stderr.strip().splitlines()[-1:] or 'failed'})"
    return None


def run(*argv: str, input: str | None = None, timeout: float = 900) -> str:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


class Kind:
    def __init__(self, kind: str, kubectl: str, helm: str, kubeconfig: Path) -> None:
        self.kind, self.kubectl_bin, self.helm_bin, self.kubeconfig = kind, kubectl, helm, kubeconfig

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return run(self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args, input=input)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def helm(self, *args: str) -> str:
        return run(self.helm_bin, "--kubeconfig", str(self.kubeconfig), *args)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    reason = docker_works()
    if reason:
        pytest.skip(f"kind e2e needs a Docker engine: {reason}")
    kind, kubectl, helm = tool("kind"), tool("kubectl"), tool("helm")
    if not (kind and kubectl and helm):
        pytest.skip("kind e2e needs kind, kubectl and helm (WITH_KIND=1 hack/build-k8s.sh builds all three)")
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    for image in ("operator", "probe"):
        run("docker", "build", "-f", str(ROOT / "images" / image / "Dockerfile"), "-t", f"gputopo-{image}:{TAG}",
            str(ROOT), timeout=1800)  # fmt: skip
    run(kind, "create", "cluster", "--name", CLUSTER, "--config", str(HERE / "kind-config.yaml"),
        "--kubeconfig", str(kubeconfig), "--wait", "180s")  # fmt: skip
    try:
        for image in ("operator", "probe"):
            run(kind, "load", "docker-image", f"gputopo-{image}:{TAG}", "--name", CLUSTER)
        yield Kind(kind, kubectl, helm, kubeconfig)
    finally:
        if os.environ.get("GPUTOPO_KEEP_KIND") != "1":
            subprocess.run([kind, "delete", "cluster", "--name", CLUSTER], capture_output=True)


@pytest.fixture(scope="module")
def workers(cluster: Kind) -> list[str]:
    """The GPU workers, each advertising nvidia.com/gpu as a device plugin would."""
    names = cluster.kubectl(
        "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "jsonpath={.items[*].metadata.name}"
    ).split()
    assert len(names) == 2, names
    for name in names:
        patch = [
            {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(GPUS_PER_NODE)},
            {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": str(GPUS_PER_NODE)},
        ]
        cluster.kubectl("patch", "node", name, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    return sorted(names)


@pytest.fixture(scope="module")
def installed(cluster: Kind, workers: list[str]) -> Kind:
    cluster.kubectl("create", "namespace", NS)
    # The probe mounts host paths (sysfs, the pod-resources socket).
    cluster.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=privileged")
    cluster.helm(
        "install", RELEASE, str(ROOT / "charts" / "gputopo"), "-n", NS, "--wait", "--timeout", "5m",
        "--set", "operator.image.repository=gputopo-operator", "--set", f"operator.image.tag={TAG}",
        "--set", "operator.image.pullPolicy=Never",
        "--set", "probe.image.repository=gputopo-probe", "--set", f"probe.image.tag={TAG}",
        "--set", "probe.image.pullPolicy=Never",
        "--set", "probe.fake=hgx-h100", "--set", "probe.intervalSeconds=1",
        "--set", f"probe.extraArgs={{--fault-dir={FAULT_DIR}}}",
        "--set", "operator.config.unschedulableTimeoutSeconds=60",
    )  # fmt: skip

    def published() -> bool:
        items = cluster.get("nodetopologies")["items"]
        return {i["metadata"]["name"] for i in items if i.get("status", {}).get("gpus")} >= set(workers)

    wait_for("a NodeTopology from the probe on each worker", published, timeout=180, every=EVERY)
    return cluster


def trainingjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "workers": 2,
            "gpusPerWorker": 4,
            "topology": {"intraNode": "nvlink"},
            "failurePolicy": {"onLinkFailure": "Reschedule", "maxRestarts": 3, "backoffSeconds": 1,
                              "gracePeriodSeconds": 1},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "registry.k8s.io/pause:3.10"}]}},
        },
    }  # fmt: skip


def test_probe_publishes_node_labels(installed: Kind, workers: list[str]) -> None:
    for name in workers:
        labels = installed.get("node", name)["metadata"]["labels"]
        assert labels.get("gputopo.io/gpu.count") == str(GPUS_PER_NODE), labels
        assert labels.get("gputopo.io/interconnect") == "nvswitch", labels


def test_trainingjob_runs_and_survives_a_link_failure(installed: Kind, workers: list[str]) -> None:
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump(trainingjob("e2e")))

    def running() -> Any:
        status = installed.get("trainingjob", "e2e", "-n", "default").get("status", {})
        return status if status.get("phase") == "Running" else None

    status = wait_for("the TrainingJob to run", running, timeout=300, every=EVERY)
    first = status["placement"]
    assert sorted(w["node"] for w in first["workers"]) == workers
    pods = installed.get("pods", "-n", "default", "-l", "gputopo.io/job=e2e")["items"]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

    rank0 = next(w for w in first["workers"] if w["rank"] == 0)
    a, b = sorted(rank0["gpus"])[:2]
    probe = installed.kubectl(
        "get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=probe",
        "--field-selector", f"spec.nodeName={rank0['node']}", "-o", "jsonpath={.items[0].metadata.name}",
    )  # fmt: skip
    inject = (
        "from gputopo_probe.fake.faults import FaultStore; "
        f"FaultStore({FAULT_DIR!r}).link({rank0['node']!r}, {a}, {b}, 'down')"
    )
    installed.kubectl("exec", "-n", NS, probe, "--", "python", "-c", inject)

    def link_down() -> bool:
        links = installed.get("nodetopology", rank0["node"]).get("status", {}).get("links", [])
        return any({link["a"], link["b"]} == {a, b} and link["state"] == "Down" for link in links)

    wait_for(f"the probe to report link {a}-{b} on {rank0['node']} Down", link_down, timeout=120, every=EVERY)

    def replaced() -> Any:
        status = installed.get("trainingjob", "e2e", "-n", "default").get("status", {})
        placement = status.get("placement") or {}
        if status.get("phase") == "Running" and placement.get("generation", 0) > first["generation"]:
            return status
        return None

    after = wait_for("the gang to be re-placed and running again", replaced, timeout=300, every=EVERY)
    assert after["restarts"] >= 1
    for worker in after["placement"]["workers"]:
        if worker["node"] == rank0["node"]:
            assert not {a, b} <= set(worker["gpus"]), "the new plan still uses the failed link"
