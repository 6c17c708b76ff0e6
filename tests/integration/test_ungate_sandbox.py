"""`gputopo ungate` against the sandbox's real kube-apiserver with no operator running: it lifts gputopo's gate from
one gang, one namespace or every namespace, leaves every other scheduling gate in place, and a dry run changes
nothing. The command runs as a user runs it, a process of its own with $KUBECONFIG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.gangs.model import GATE
from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-ungate-a"
OTHER = "gputopo-ungate-b"
KUEUE_GATE = "kueue.x-k8s.io/admission"
HOLD = "example.com/hold"

# (namespace, pod, gang label, gates at creation)
PODS = [
    (NS, "a-0", "a", [KUEUE_GATE, GATE]),
    (NS, "a-1", "a", [GATE]),
    (NS, "b-0", "b", [GATE, HOLD]),
    (NS, "held-0", "", [HOLD]),
    (OTHER, "c-0", "c", [GATE]),
]


def ungate(sandbox: SandboxHandle, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    argv = [sys.executable, "-c", "from gputopo.cli.main import app; app()", "ungate", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


def gates_now(sandbox: SandboxHandle) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ns in (NS, OTHER):
        for pod in sandbox.get_json("pods", "-n", ns)["items"]:
            names = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            out[f"{ns}/{pod['metadata']['name']}"] = names
    return out


def body(namespace: str, name: str, gang: str, gates: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"gputopo.io/gang": gang} if gang else {}},
        "spec": {
            "schedulingGates": [{"name": g} for g in gates],
            "terminationGracePeriodSeconds": 0,
            # Never bound once released: the test reads the gates, not where the pod runs.
            "nodeSelector": {"gputopo.io/ungate-test": "nowhere"},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def namespaces(sandbox: SandboxHandle) -> Iterator[None]:
    for ns in (NS, OTHER):
        sandbox.kubectl("create", "namespace", ns, check=False)
    for ns in (NS, OTHER):
        sandbox.wait_for(
            f"{ns}'s default ServiceAccount", lambda ns=ns: sandbox.kubectl("get", "sa", "default", "-n", ns)
        )
    yield
    for ns in (NS, OTHER):
        sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def gated(sandbox: SandboxHandle, namespaces: None) -> Iterator[None]:
    """The pods of ``PODS``, created afresh for each test."""
    items = [body(*p) for p in PODS]
    sandbox.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    yield
    for ns in (NS, OTHER):
        sandbox.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=true", check=False)


BEFORE = {f"{ns}/{name}": gates for ns, name, _, gates in PODS}

CASES = [
    ("one-gang", ["-n", NS, "--gang", "a"], {f"{NS}/a-0": [KUEUE_GATE], f"{NS}/a-1": []}, 2),
    ("one-gang-by-source", ["-n", NS, "--gang", "gputopo/b"], {f"{NS}/b-0": [HOLD]}, 1),
    ("one-namespace", ["-n", NS], {f"{NS}/a-0": [KUEUE_GATE], f"{NS}/a-1": [], f"{NS}/b-0": [HOLD]}, 3),
    ("all-namespaces", ["--all"],
     {f"{NS}/a-0": [KUEUE_GATE], f"{NS}/a-1": [], f"{NS}/b-0": [HOLD], f"{OTHER}/c-0": []}, 4),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "lifted", "count"), CASES, ids=[c[0] for c in CASES])
def test_ungate_lifts_only_gputopos_gate_from_the_pods_named(
    sandbox: SandboxHandle, gated: None, case: str, args: list[str], lifted: dict[str, list[str]], count: int
) -> None:
    out = ungate(sandbox, *args)
    assert out.returncode == 0, out.stderr
    assert f"{count} pods released from gputopo.io/placement" in out.stdout, out.stdout
    assert gates_now(sandbox) == {**BEFORE, **lifted}, case


def test_a_dry_run_names_the_pods_and_changes_nothing(sandbox: SandboxHandle, gated: None) -> None:
    out = ungate(sandbox, "-n", NS, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:3] == [
        f"would release {NS}/a-0",
        f"would release {NS}/a-1",
        f"would release {NS}/b-0",
    ]
    assert gates_now(sandbox) == BEFORE


def test_an_api_server_that_refuses_is_a_one_line_error(sandbox: SandboxHandle, gated: None) -> None:
    env_kubeconfig = sandbox.kubeconfig.parent / "ungate-nobody.kubeconfig"
    config = sandbox.kubeconfig.read_text()
    env_kubeconfig.write_text(config)
    nobody = subprocess.run(
        [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(env_kubeconfig), "config", "set-credentials",
         "nobody", "--token=not-a-token"], capture_output=True, text=True,
    )  # fmt: skip
    assert nobody.returncode == 0, nobody.stderr
    context = subprocess.run(
        [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(env_kubeconfig), "config", "set-context",
         "--current", "--user=nobody"], capture_output=True, text=True,
    )  # fmt: skip
    assert context.returncode == 0, context.stderr
    env = {**os.environ, "KUBECONFIG": str(env_kubeconfig)}
    argv = [sys.executable, "-c", "from gputopo.cli.main import app; app()", "ungate", "--all"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and "401" in out.stderr, out.stderr
    assert gates_now(sandbox) == BEFORE
