"""The Helm chart's names as the tests install it, and helm itself: the built binary, ``helm template`` parsed,
one object of a kind picked out. Shared by the chart's tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.sandbox.binaries import KUBE_VERSION, cache_root

__all__ = [
    "CHART",
    "NS",
    "OPERATOR",
    "POLICY",
    "PROBE",
    "RELEASE",
    "SANDBOX_VALUES",
    "TEST_LABEL",
    "find",
    "helm",
    "helm_binary",
    "render",
]

CHART = Path(__file__).parents[2] / "charts" / "gputopo"

RELEASE = "gputopo-it"
NS = "gputopo-chart-test"
OPERATOR = f"{RELEASE}-operator"
PROBE = f"{RELEASE}-probe"
POLICY = f"{PROBE}-own-node"
# The sandbox has no NVIDIA runtime; fake-NVML mode drops the runtime class and the NVIDIA environment.
SANDBOX_VALUES = ["--set", "probe.fake=hgx-h100", "--set", "probe.testCluster=true"]
TEST_LABEL = "gputopo.io/chart-test"


def helm_binary() -> Path:
    bin_dir = Path(os.environ.get("GPUTOPO_K8S_BIN", str(cache_root() / f"k8s-{KUBE_VERSION}" / "bin")))
    helm = bin_dir / "helm"
    if not helm.is_file():
        pytest.fail(f"helm is not built yet (no {helm}); build it with `bash hack/build-k8s.sh`")
    return helm


def helm(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(helm_binary()), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def render(*args: str, namespace: str = NS) -> list[dict[str, Any]]:
    out = helm("template", RELEASE, str(CHART), "-n", namespace, *args)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {len(hits)}"
    return hits[0]
