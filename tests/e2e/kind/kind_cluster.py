"""What the kind end-to-end test needs to reach its cluster: the tools, kubectl/helm on the cluster, and names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gputopo.sandbox.binaries import KUBE_VERSION, cache_root

ROOT = Path(__file__).parents[3]
HERE = Path(__file__).parent
CLUSTER = "gputopo-e2e"
NODE_IMAGE = os.environ.get("KIND_NODE_IMAGE", f"gputopo/kind-node:{KUBE_VERSION}")
NS = "gputopo-system"
RELEASE = "gputopo"
TAG = "e2e"
IMAGES = ("gputopo-operator", "gputopo-probe", "gputopo-allreduce")
TOPOLOGY_LABEL = "gputopo.io/fake-topology"
FAULT_DIR = "/tmp/gputopo-faults"  # the probe's writable scratch dir (an emptyDir in the chart)
EVERY = 1.0  # seconds between polls of the cluster

# Figures the tests measure, printed at the end of the run.
TIMINGS: dict[str, float] = {}


def tool(name: str) -> str | None:
    cached = cache_root() / f"k8s-{KUBE_VERSION}" / "bin" / name
    return str(cached) if cached.is_file() else shutil.which(name)


def run(*argv: str, input: str | None = None, timeout: float = 900) -> str:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout[-2000:]}")
    return proc.stdout


def unavailable() -> str | None:
    """None when the test can run; otherwise why not."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no Docker engine answers (run hack/docker-engine.sh): {probe.stderr.strip().splitlines()[-1:]}"
    if subprocess.run(["docker", "image", "inspect", NODE_IMAGE], capture_output=True).returncode != 0:
        return f"no node image {NODE_IMAGE} (run hack/build-kind-node.sh)"
    missing = [name for name in ("kind", "kubectl", "helm") if tool(name) is None]
    if missing:
        return f"missing {', '.join(missing)} (WITH_KIND=1 hack/build-k8s.sh builds them)"
    return None


class Kind:
    """kubectl, helm and docker against one kind cluster."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_bin, self.helm_bin = str(tool("kubectl")), str(tool("helm"))

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 300) -> str:
        return run(self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args, input=input, timeout=timeout)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def helm(self, *args: str, timeout: float = 600) -> str:
        return run(self.helm_bin, "--kubeconfig", str(self.kubeconfig), *args, timeout=timeout)

    def workers(self) -> list[str]:
        out = self.kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name")
        return sorted(line.removeprefix("node/") for line in out.split())
