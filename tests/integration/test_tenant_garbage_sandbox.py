"""Bad input stays with its owner, on the sandbox's real API server: whatever one tenant writes into its own
namespace's pods, annotations and owner objects, the gangs and TrainingJobs of another namespace are placed as ever,
the operator logs no traceback and stays ready.

One operator watches two namespaces, both opted into gating: the tenant's and a team's. It serves ``/readyz`` beside
``/metrics`` on a port of its own. The tenant writes only what its namespace's rights allow: pods (gated by gputopo's
gate, which the pod itself names, or steered by its ``gputopo.io/gang`` annotation) with labels and annotations of
its choosing, and owner objects under CRDs that keep unknown fields (``gputopo.sandbox.garbage``).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from stand_in_crds import crd, installed

from gputopo.sandbox.admission import enable_gating
from gputopo.sandbox.garbage import GATE, OWNER_KINDS, garbage_owners, garbage_pods
from gputopo.sandbox.harness import Jobs, OperatorProcess, training_job, wait_for
from gputopo.sandbox.testing import SandboxHandle

TEAM = "garbage-team"
TENANT = "garbage-tenant"
GARBAGE_PODS = 300  # with 39 owner objects; created in about 10 s, read by every pass
BATCH = 50
HUGE = "9" * 5000  # past Python's integer-string limit (4,300 digits): int() raises on it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owner_crds() -> list[dict[str, Any]]:
    out = []
    for api, kind, plural in OWNER_KINDS:
        group, version = api.split("/")
        out.append(crd(group, version, plural, kind))
    return out


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with installed(sandbox.kubectl, _owner_crds()):
        yield from _operator(sandbox, tmp_path_factory)


def _operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    for ns in (TEAM, TENANT):
        sandbox.kubectl("create", "namespace", ns, check=False)
        enable_gating(sandbox.kubectl, ns)
    proc = OperatorProcess(
        sandbox.kubeconfig,
        tmp_path_factory.mktemp("tenant-garbage") / "operator.log",
        {
            "GPUTOPO_NAMESPACES": f"{TEAM},{TENANT}",
            "GPUTOPO_OPERATOR_NAMESPACE": TEAM,
            "GPUTOPO_IDENTITY": TEAM,
            "GPUTOPO_METRICS_PORT": str(_free_port()),
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


class Tenancy:
    """The two namespaces as kubectl shows them, and the operator's own endpoints."""

    def __init__(self, sandbox: SandboxHandle, operator: OperatorProcess) -> None:
        self.sandbox, self.operator = sandbox, operator
        self.team = Jobs(sandbox.kubectl, TEAM)

    def create(self, namespace: str, items: list[dict[str, Any]]) -> None:
        """Create ``items`` (kubectl's output of a created List is one document per object: read back by ``get``)."""
        for start in range(0, len(items), BATCH):
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items[start : start + BATCH]})
            self.sandbox.kubectl("create", "-n", namespace, "-f", "-", input=text)

    def get(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "json"] + (["-l", selector] if selector else [])
        items: list[dict[str, Any]] = json.loads(self.sandbox.kubectl(*args))["items"]
        return items

    def gang(self, namespace: str, name: str) -> dict[str, Any]:
        out = self.sandbox.kubectl("get", "gangplacement", name, "-n", namespace, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else {}

    def wait(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        try:
            return wait_for(what, predicate, timeout=timeout, every=0.5)
        except AssertionError:
            print(self.operator.log_tail(80))
            raise

    def bound(self, namespace: str, selector: str, count: int) -> bool:
        """``count`` pods of ``selector``, each without gputopo's gate and on a node."""
        pods = [p for p in self.get("pods", namespace, selector) if not p["metadata"].get("deletionTimestamp")]
        gated = [p for p in pods if GATE in {g["name"] for g in p["spec"].get("schedulingGates") or []}]
        return len(pods) == count and not gated and all(p["spec"].get("nodeName") for p in pods)

    def http(self, path: str) -> tuple[int, str]:
        port = self.operator.env["GPUTOPO_METRICS_PORT"]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def pass_failures(self) -> float:
        status, body = self.http("/metrics")
        assert status == 200, body
        lines = [line for line in body.splitlines() if line.startswith("gputopo_control_pass_failures_total ")]
        assert lines, "no gputopo_control_pass_failures_total in /metrics"
        return float(lines[0].split()[1])

    def log(self) -> str:
        return self.operator.log_file.read_text(errors="replace")

    def place_valid_gangs(self, prefix: str) -> int:
        """A TrainingJob, a gated Indexed Job and a gang of gputopo's pod contract in the team's namespace, each
        placed whole; how many."""
        self.team.apply(training_job(f"{prefix}-tj", TEAM, workers=2, gpusPerWorker=4))
        self.create(TEAM, [_indexed_job(f"{prefix}-idx", 2, 4), *_contract_pods(f"{prefix}-bare", 2, 4)])
        self.team.wait_phase(f"{prefix}-tj", "Running", timeout=90)
        self.wait(f"{prefix}-idx bound", lambda: self.bound(TEAM, f"job-name={prefix}-idx", 2), 90)
        self.wait(f"{prefix}-bare bound", lambda: self.bound(TEAM, f"gputopo.io/gang={prefix}-bare", 2), 90)
        for name in (f"job-{prefix}-idx", f"gputopo-{prefix}-bare"):
            status = self.gang(TEAM, name).get("status") or {}
            assert status.get("phase") in ("Running", "Released") and status.get("ranks"), (name, status)
        return 3

    def assert_healthy(self) -> None:
        status, body = self.http("/readyz")
        assert status == 200, body
        assert self.pass_failures() == 0
        log = self.log()
        assert "Traceback" not in log and "control pass failed" not in log, self.operator.log_tail(80)
        assert self.operator.running

    def clean(self) -> None:
        for ns in (TEAM, TENANT):
            for kind in ("trainingjobs", "jobs", "jobsets", "leaderworkersets", "pytorchjobs", "pods"):
                self.sandbox.kubectl("delete", kind, "--all", "-n", ns, "--wait=false", "--grace-period=0", check=False)
        self.wait(
            "namespaces emptied of pods", lambda: not self.get("pods", TEAM) and not self.get("pods", TENANT), 120
        )
        for ns in (TEAM, TENANT):
            self.sandbox.kubectl("delete", "gangplacements", "--all", "-n", ns, "--wait=false", check=False)


@pytest.fixture
def tenancy(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Tenancy]:
    handle = Tenancy(sandbox, operator)
    yield handle
    handle.clean()
    assert operator.running, operator.log_tail()


def _status(record: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = record.get("status") or {}
    return status


def _gpu_spec(gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "restartPolicy": "Never",
        "schedulingGates": [{"name": GATE}],
        "containers": [{"name": "trainer", "image": "pytorch", "resources": {"limits": limits}}],
    }


def _indexed_job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "template": {"spec": _gpu_spec(gpus)},
        },
    }


def _contract_pods(name: str, size: int, gpus: int, **annotations: str) -> list[dict[str, Any]]:
    """A gang of gputopo's pod contract: ``size`` gated pods of ``gpus`` GPUs."""
    labels = {"gputopo.io/gang": name, "gputopo.io/gang-size": str(size)}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{rank}",
                "labels": {**labels, "gputopo.io/rank": str(rank)},
                "annotations": annotations,
            },
            "spec": _gpu_spec(gpus),
        }
        for rank in range(size)
    ]


def test_one_pod_with_a_5000_digit_slice_size_stops_no_placement_in_another_namespace(tenancy: Tenancy) -> None:
    """One gated GPU pod of the tenant's, its annotation gputopo.io/slice-size 5,000 digits (past Python's
    integer-string limit): before, reading it raised out of the gang reader, every control pass failed from then
    on, and the team's TrainingJob and gangs were never placed."""
    started = time.monotonic()
    tenancy.create(TENANT, _contract_pods("stall", 1, 1, **{"gputopo.io/slice-size": HUGE}))
    placed = tenancy.place_valid_gangs("after-stall")
    refused = tenancy.wait(
        "the tenant's gang refused",
        lambda: (g := tenancy.gang(TENANT, "gputopo-stall")).get("status", {}).get("phase") == "Refused" and g,
    )
    message = refused["status"]["message"]
    assert "annotation gputopo.io/slice-size" in message and "(5000 characters)" in message, message
    assert len(message) < 300, message
    stall = tenancy.get("pods", TENANT, "gputopo.io/gang=stall")
    assert [g["name"] for g in stall[0]["spec"]["schedulingGates"]] == [GATE] and not stall[0]["spec"].get("nodeName")
    tenancy.assert_healthy()
    print(f"stall: {placed} valid gangs of {TEAM} placed beside it in {time.monotonic() - started:.1f} s")


def test_generated_garbage_of_one_tenant_leaves_every_valid_gang_of_another_placed(tenancy: Tenancy) -> None:
    started = time.monotonic()
    tenancy.create(TENANT, garbage_owners(TENANT))
    owners = [o for _, _, plural in OWNER_KINDS for o in tenancy.get(plural, TENANT)]
    pods = garbage_pods(TENANT, GARBAGE_PODS, owners)
    tenancy.create(TENANT, pods)
    made = time.monotonic() - started
    placed = tenancy.place_valid_gangs("valid")

    def settled() -> list[dict[str, Any]] | None:
        """The tenant's gang records, once two reads a few passes apart show the same phases."""
        first = tenancy.get("gangplacements", TENANT)
        time.sleep(3)
        again = tenancy.get("gangplacements", TENANT)
        phases = sorted((r["metadata"]["name"], (r.get("status") or {}).get("phase")) for r in again)
        before = sorted((r["metadata"]["name"], (r.get("status") or {}).get("phase")) for r in first)
        return again if again and phases == before else None

    records = tenancy.wait("the tenant's gang records settled", settled, timeout=90)
    phases = [_status(r).get("phase") for r in records]
    by_phase = {p: phases.count(p) for p in sorted(set(phases), key=str)}
    print(
        f"garbage: {len(owners)} owner objects and {len(pods)} pods in {TENANT} made in {made:.1f} s; "
        f"valid gangs placed in {TEAM}: {placed} of 3; the tenant's gang records by phase: {by_phase}; "
        f"{time.monotonic() - started:.1f} s in all"
    )
    assert len(owners) == len(garbage_owners(TENANT))
    holding = [r["metadata"]["name"] for r in records if any(k.get("gpus") for k in _status(r).get("ranks") or [])]
    assert not holding, f"garbage gangs hold GPUs: {holding}"
    tripped = [m for r in records if "gputopo could not" in (m := _status(r).get("message") or "")]
    assert not tripped, tripped[:3]
    tenancy.assert_healthy()
