"""The GangPlacement CRD on the sandbox's real kube-apiserver: `kubectl get gangs` finds and prints it, and the
schema refuses a bad object with a message that names the field."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-gangplacement-test"
NAME = "job-trainer"
GANG: dict[str, Any] = {
    "apiVersion": "gputopo.io/v1alpha1",
    "kind": "GangPlacement",
    "metadata": {"name": NAME, "namespace": NS},
    "spec": {"source": "job", "gang": "trainer", "size": 2},
}
PLACED: dict[str, Any] = {
    "phase": "Running",
    "generation": 1,
    "ranks": [{"rank": 0, "node": "gpu-a", "gpus": [0, 1, 2, 3]}, {"rank": 1, "node": "gpu-b", "gpus": [0, 1, 2, 3]}],
    "nodes": ["gpu-a", "gpu-b"],
    "nodeCount": 2,
    "gpuCount": 8,
    "estimatedBusBandwidthGBps": 48.5,
    "restarts": 1,
}


def kubectl(sandbox: SandboxHandle, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), *args]
    return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60)


def patch_status(sandbox: SandboxHandle, status: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl(
        sandbox, "patch", "gangplacement", NAME, "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


@pytest.fixture(scope="module")
def gang(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    sandbox.kubectl("create", "namespace", NS, check=False)
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(GANG))
    out = patch_status(sandbox, PLACED)
    assert out.returncode == 0, out.stderr
    yield sandbox
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


@pytest.mark.parametrize("name", ["gangs", "gang", "gangplacements", "gangplacement.gputopo.io"])
def test_kubectl_get_gangs_prints_the_placement(gang: SandboxHandle, name: str) -> None:
    header, row = gang.kubectl("get", name, "-n", NS).splitlines()
    assert header.split() == ["NAME", "SOURCE", "GANG", "PHASE", "NODES", "GPUS", "BUSBW", "RESTARTS", "AGE"]
    assert row.split()[:8] == [NAME, "job", "trainer", "Running", "2", "8", "48.5", "1"]


REFUSED_STATUS = [
    ("unknown-phase", {"phase": "Bogus"}, "status.phase"),
    ("negative-restarts", {"restarts": -1}, "status.restarts"),
    ("negative-generation", {"generation": -1}, "status.generation"),
    ("node-count-not-the-nodes", {"nodeCount": 3}, "status.nodeCount must be the number of status.nodes"),
    ("rank-twice", {"ranks": [{"rank": 0, "node": "a"}, {"rank": 0, "node": "b"}]}, "status.ranks"),
]


@pytest.mark.parametrize(("case", "status", "field"), REFUSED_STATUS, ids=[c[0] for c in REFUSED_STATUS])
def test_a_bad_status_is_refused_naming_the_field(
    gang: SandboxHandle, case: str, status: dict[str, Any], field: str
) -> None:
    out = patch_status(gang, status)
    assert out.returncode != 0, f"{case}: the API server accepted {status}"
    assert field in out.stderr, out.stderr
    assert gang.get_json("gangplacement", NAME, "-n", NS)["status"]["phase"] == "Running"


REFUSED_SPEC = [
    ("unknown-source", {"source": "slurm", "gang": "g"}, "spec.source"),
    ("no-gang", {"source": "job"}, "spec.gang"),
    ("size-zero", {"source": "job", "gang": "g", "size": 0}, "spec.size"),
]


@pytest.mark.parametrize(("case", "spec", "field"), REFUSED_SPEC, ids=[c[0] for c in REFUSED_SPEC])
def test_a_bad_spec_is_refused_on_create_naming_the_field(
    gang: SandboxHandle, case: str, spec: dict[str, Any], field: str
) -> None:
    manifest = {**GANG, "metadata": {"name": f"bad-{case}", "namespace": NS}, "spec": spec}
    out = kubectl(gang, "create", "-f", "-", input=json.dumps(manifest))
    assert out.returncode != 0, f"{case}: the API server accepted {spec}"
    assert field in out.stderr, out.stderr


def test_the_gang_a_placement_names_cannot_change(gang: SandboxHandle) -> None:
    out = kubectl(gang, "patch", "gangplacement", NAME, "-n", NS, "--type=merge", "-p", '{"spec":{"gang":"other"}}')
    assert out.returncode != 0
    assert "spec.source and spec.gang name the gang and cannot change" in out.stderr, out.stderr
