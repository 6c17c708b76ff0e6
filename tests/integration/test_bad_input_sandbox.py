"""Bad input stays with its owner, on the sandbox's real API server: one tenant's pods and owner objects, however
odd, are refused on their own, and the gangs of another namespace are placed as ever.

One operator watches two namespaces: the tenant's and a team's. ``/readyz`` (beside ``/metrics``) says whether its
control passes complete. The tenant writes only what its namespace's rights allow: pods (no GPU, no gate needed)
with labels and annotations of its choosing, and owner objects under CRDs that keep unknown fields.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from stand_in_crds import crd

from gputopo.sandbox.garbage import GATE, OWNER_KINDS, garbage_owners, garbage_pods
from gputopo.sandbox.harness import Jobs, OperatorProcess, training_job, wait_for
from gputopo.sandbox.testing import SandboxHandle

NS = TEAM = "bad-input-team"
TENANT = "bad-input-tenant"
HUGE = "9" * 5000  # past Python's integer-string limit: int() raises on it
GARBAGE_PODS = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _crds() -> list[dict[str, Any]]:
    out = []
    for api, kind, plural in OWNER_KINDS:
        group, version = api.split("/")
        out.append(crd(group, version, plural, kind))
    return out


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    crds = _crds()
    for c in crds:  # one another module deleted may still be going
        sandbox.kubectl("wait", "--for=delete", f"crd/{c['metadata']['name']}", "--timeout=60s", check=False)
    sandbox.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}))
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    sandbox.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", *names)
    for ns in (TEAM, TENANT):
        sandbox.kubectl("create", "namespace", ns, check=False)
    port = _free_port()
    proc = OperatorProcess(
        sandbox.kubeconfig,
        tmp_path_factory.mktemp("bad-input") / "operator.log",
        {
            "GPUTOPO_NAMESPACES": f"{TEAM},{TENANT}",
            "GPUTOPO_OPERATOR_NAMESPACE": TEAM,
            "GPUTOPO_IDENTITY": TEAM,
            "GPUTOPO_METRICS_PORT": str(port),
            "GPUTOPO_LIVENESS_PORT": "0",
            "GPUTOPO_LOG_FORMAT": "plain",
            "GPUTOPO_READINESS_FAILED_PASSES": "3",
            "GPUTOPO_GANG_ARRIVAL_TIMEOUT_SECONDS": "30",
        },
    )
    proc.start()
    yield proc
    for ns in (TEAM, TENANT):
        sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    proc.stop()
    for c in crds:
        sandbox.kubectl("delete", "crd", c["metadata"]["name"], "--wait=false", check=False)


def _ready(operator: OperatorProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{operator.env['GPUTOPO_METRICS_PORT']}/readyz", timeout=5
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def _metric(operator: OperatorProcess, name: str) -> float:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{operator.env['GPUTOPO_METRICS_PORT']}/metrics", timeout=5
    ) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def _create(sandbox: SandboxHandle, namespace: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    out = sandbox.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=text)
    found = json.loads(out)
    return list(found["items"]) if found.get("kind") == "List" else [found]


def _gang(sandbox: SandboxHandle, namespace: str, name: str) -> dict[str, Any]:
    out = sandbox.kubectl("get", "gangplacement", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else {}


def _wait(operator: OperatorProcess, what: str, predicate: Any, timeout: float = 60.0) -> Any:
    try:
        return wait_for(what, predicate, timeout=timeout, every=0.5)
    except AssertionError:
        print(operator.log_tail(80))
        raise


def _contract_pods(name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    """A gang of gputopo's pod contract: ``size`` gated pods of ``gpus`` GPUs."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{rank}",
                "labels": {"gputopo.io/gang": name, "gputopo.io/gang-size": str(size), "gputopo.io/rank": str(rank)},
            },
            "spec": {
                "restartPolicy": "Never",
                "schedulingGates": [{"name": GATE}],
                "containers": [
                    {"name": "c", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                ],
            },
        }
        for rank in range(size)
    ]


def _bound(sandbox: SandboxHandle, namespace: str, selector: str, count: int) -> bool:
    out = sandbox.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    pods = json.loads(out)["items"]
    ungated = [p for p in pods if GATE not in {g["name"] for g in p["spec"].get("schedulingGates") or []}]
    return len(pods) == count and all(p["spec"].get("nodeName") for p in ungated) and len(ungated) == count


def _clean(sandbox: SandboxHandle) -> None:
    for ns in (TEAM, TENANT):
        for kind in ("trainingjobs", "jobsets", "leaderworkersets", "pytorchjobs", "pods", "gangplacements"):
            sandbox.kubectl("delete", kind, "--all", "-n", ns, "--wait=false", "--grace-period=0", check=False)


def test_one_pod_of_a_5000_digit_count_stops_no_placement_in_another_namespace(
    sandbox: SandboxHandle, operator: OperatorProcess
) -> None:
    """Kueue's pod-group-total-count of 5,000 digits on one pod of the tenant's (no GPU, no gate: the annotation
    gputopo.io/gang makes it a member): before, every control pass raised from then on and the team's TrainingJob
    was never placed."""
    team = Jobs(sandbox.kubectl, TEAM)
    try:
        stall = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "stall",
                "labels": {"kueue.x-k8s.io/pod-group-name": "stall"},
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": HUGE, "gputopo.io/gang": "kueue/stall"},
            },
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
        }
        _create(sandbox, TENANT, [stall])
        team.apply(training_job("after-stall", TEAM))
        team.wait_phase("after-stall", "Running", timeout=60)
        refused = _wait(
            operator,
            "the tenant's gang refused",
            lambda: (g := _gang(sandbox, TENANT, "kueue-stall")).get("status", {}).get("phase") == "Refused" and g,
        )
        message = refused["status"]["message"]
        assert "annotation kueue.x-k8s.io/pod-group-total-count" in message and "(5000 characters)" in message
        assert len(message) < 300
        assert _ready(operator)[0] == 200
        assert _metric(operator, "gputopo_control_pass_failures_total") == 0
        assert operator.running and "Traceback" not in operator.log_file.read_text(errors="replace")
    finally:
        _clean(sandbox)


def test_generated_garbage_of_one_tenant_leaves_every_valid_gang_of_another_placed(
    sandbox: SandboxHandle, operator: OperatorProcess
) -> None:
    owners = _create(sandbox, TENANT, garbage_owners(TENANT))
    pods = garbage_pods(TENANT, GARBAGE_PODS, owners)
    for start in range(0, len(pods), 40):
        _create(sandbox, TENANT, pods[start : start + 40])
    team = Jobs(sandbox.kubectl, TEAM)
    try:
        team.apply(training_job("valid-tj", TEAM, workers=2, gpusPerWorker=4))
        _create(sandbox, TEAM, _contract_pods("valid-bare", 2, 4))
        _create(sandbox, TEAM, _contract_pods("valid-one", 1, 8))
        team.wait_phase("valid-tj", "Running", timeout=90)
        _wait(operator, "valid-bare bound", lambda: _bound(sandbox, TEAM, "gputopo.io/gang=valid-bare", 2), 90)
        _wait(operator, "valid-one bound", lambda: _bound(sandbox, TEAM, "gputopo.io/gang=valid-one", 1), 90)
        placed = 3
        records = json.loads(sandbox.kubectl("get", "gangplacements", "-n", TENANT, "-o", "json"))["items"]
        phases = [r.get("status", {}).get("phase") for r in records]
        log = operator.log_file.read_text(errors="replace")
        status, body = _ready(operator)
        print(
            f"garbage: {len(owners)} owner objects and {len(pods)} pods in {TENANT}; "
            f"valid gangs placed in {TEAM}: {placed} of 3; tenant GangPlacements by phase: "
            f"{ {p: phases.count(p) for p in set(phases)} }; /readyz {status}; "
            f"failed passes {_metric(operator, 'gputopo_control_pass_failures_total'):.0f}"
        )
        assert status == 200, body
        assert _metric(operator, "gputopo_control_pass_failures_total") == 0
        assert "Traceback" not in log and "control pass failed" not in log
        assert not any("gputopo could not" in (r.get("status", {}).get("message") or "") for r in records)
        assert operator.running
    finally:
        _clean(sandbox)
