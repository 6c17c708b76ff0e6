"""Kueue-managed batch/v1 Jobs placed by gputopo, beside Kueue's real manager on the sandbox.

Kueue admits by quota (it suspends each Job with a queue-name label until its Workload is admitted, then the Job
controller makes the pods with the flavor's node selector); gputopo places the pods of admitted workloads on a
flavor without a topology and leaves those of a TAS flavor to Kueue. The Jobs' pods carry gputopo's gate in their
template, as the chart's admission policy would give them (``test_admission_policy`` proves the policy).

Two nodes of eight GPUs: a gang of two 8-GPU ranks fills the cluster, so a gang placed after another that held
every GPU shows the first one's plan was let go. kwok ends a Job's pods as soon as they run; a Job whose plan must
hold its GPUs has pods kube-scheduler never binds (``UNBINDABLE``) though gputopo plans and steers them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kueue_sandbox import kueue_sandbox

from gputopo.api.group import GPU_RESOURCE
from gputopo.sandbox.harness import OperatorProcess, namespaced_operator, wait_for
from gputopo.sandbox.kueue_harness import HOLD_GATE, UNBINDABLE, KueueJobs, batch_job, group_pod
from gputopo.sandbox.kueue_queues import (
    GPU_NODE_LABELS,
    GPUTOPO_QUEUE,
    REQUIRED_TOPOLOGY,
    TAS_QUEUE,
    TOPOLOGY_GATE,
)
from gputopo.sandbox.testing import SandboxHandle

NAME = f"{os.environ.get('GPUTOPO_TEST_SANDBOX', 'gputopo-test')}-kueue-gangs"
NS = "kueue-gangs"
GATE = "gputopo.io/placement"
HOSTNAME = "kubernetes.io/hostname"
NODES, GPUS_PER_NODE = 2, 8
# Plenty of CPU and memory: GPUs are the only quota that binds in these tests.
ROOMY = {"cpu": "64", "memory": "512Gi"}
LINGER = "gputopo.io/test-linger"

box = kueue_sandbox(NAME, nodes=NODES, profile="hgx-h100")


@pytest.fixture(scope="module")
def operator(box: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("kueue-gangs") / "operator.log"
    # Steered pods that cannot bind (UNBINDABLE) keep their plan for the test's length.
    settings = {"GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "600"}
    # A sandbox kept from an earlier run may still be deleting the namespace that run left.
    box.kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=120s", check=False)
    with namespaced_operator(box.kubectl, box.kubeconfig, log_file, NS, settings) as proc:
        yield proc


class Gangs(KueueJobs):
    """The namespace's Kueue Jobs and the GangPlacements gputopo keeps of them."""

    def __init__(self, box: SandboxHandle, operator: OperatorProcess) -> None:
        super().__init__(box.kubectl, NS)
        self.operator = operator

    def gang(self, job: str) -> dict[str, Any]:
        """The GangPlacement of the Job ``job`` (or of the gang named ``<source>-<name>``, with its slash)."""
        name = job.replace("/", "-") if "/" in job else f"job-{job}"
        found: dict[str, Any] | None = self._get("gangplacement", name, "-n", NS)
        return found or {}

    def status(self, job: str) -> dict[str, Any]:
        found: dict[str, Any] = self.gang(job).get("status") or {}
        return found

    def events(self, job: str, reason: str) -> list[dict[str, Any]]:
        """The Events of ``reason`` on the Job ``job``."""
        found = self._get("events", "-n", NS, "--field-selector", f"involvedObject.name={job},reason={reason}")
        items: list[dict[str, Any]] = (found or {}).get("items") or []
        return items

    def wait(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        try:
            return wait_for(what, predicate, timeout=timeout, every=0.3)
        except AssertionError:
            print(self.operator.log_tail(80))
            raise

    def wait_phase(self, job: str, *phases: str, timeout: float = 60.0) -> dict[str, Any]:
        result: dict[str, Any] = self.wait(
            f"gang of {job} {'/'.join(phases)} (now {self.status(job)})",
            lambda: (s := self.status(job)).get("phase") in phases and s,
            timeout,
        )
        return result

    def wait_planned(self, job: str, ranks: int, timeout: float = 60.0) -> dict[str, Any]:
        """The gang's record once it holds a plan for ``ranks`` ranks (Planned, Running, or Released as kwok ends
        the pods it ran)."""

        def planned() -> dict[str, Any] | None:
            s = self.status(job)
            return s if len(s.get("ranks") or []) == ranks and s.get("phase") != "Pending" else None

        result: dict[str, Any] = self.wait(f"gang of {job} planned ({self.status(job)})", planned, timeout)
        return result

    def wait_steered(self, job: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """``count`` pods of the Job, each rid of gputopo's gate with its planned node and GPUs written on it."""

        def steered() -> list[dict[str, Any]] | None:
            pods = self.pods(job)
            done = [p for p in pods if not _gated(p, GATE) and "gputopo.io/gpus" in _annotations(p)]
            return done if len(done) == count == len(pods) else None

        result: list[dict[str, Any]] = self.wait(f"{count} steered pods of Job {job}", steered, timeout)
        return result


def box_pods(gangs: Gangs, selector: str) -> list[dict[str, Any]]:
    """The namespace's pods of ``selector``, those being deleted too."""
    found: list[dict[str, Any]] = (gangs._get("pods", "-n", NS, "-l", selector) or {}).get("items") or []
    return found


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = pod["metadata"].get("annotations") or {}
    return found


def _gated(pod: dict[str, Any], gate: str) -> bool:
    return any(g["name"] == gate for g in pod["spec"].get("schedulingGates") or [])


def _pinned_to(pod: dict[str, Any]) -> list[str]:
    """The nodes gputopo's required node affinity pins the pod to (``metadata.name In [...]``)."""
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}).get("nodeSelectorTerms") or []  # fmt: skip
    return [
        value
        for term in required
        for field in term.get("matchFields") or []
        if field["key"] == "metadata.name"
        for value in field["values"]
    ]


def _held(status: dict[str, Any]) -> set[tuple[str, int]]:
    """The (node, GPU) pairs a gang's record holds."""
    return {(r["node"], g) for r in status.get("ranks") or [] for g in r["gpus"]}


@pytest.fixture
def gangs(box: SandboxHandle, operator: OperatorProcess) -> Iterator[Gangs]:
    handle = Gangs(box, operator)
    handle.use_queues(GPUTOPO_QUEUE, TAS_QUEUE)
    yield handle
    handle.release_pods(LINGER)
    handle.delete_all()
    box.kubectl("delete", "gangplacements", "--all", "-n", NS, "--wait=false", check=False)
    assert operator.running, operator.log_tail()


def test_an_admitted_indexed_job_is_placed_by_gputopo(gangs: Gangs) -> None:
    created = gangs.create(batch_job("train", GPUTOPO_QUEUE, pods=2, gpus=8, scheduling_gates=[GATE]))
    assert created["spec"]["suspend"] is True
    gangs.wait_admitted("train")
    status = gangs.wait_planned("train", 2)
    assert sorted(r["rank"] for r in status["ranks"]) == [0, 1]
    assert status["gpuCount"] == 16 and status["estimatedBusBandwidthGBps"] > 0
    pods = gangs.wait_bound("train", 2)
    plan = {r["pod"]: r for r in status["ranks"]}
    for pod in pods:
        rank = plan[pod["metadata"]["name"]]
        assert _pinned_to(pod) == [rank["node"]] == [pod["spec"]["nodeName"]]
        assert _annotations(pod)["gputopo.io/gpus"] == ",".join(map(str, rank["gpus"]))
        assert pod["spec"]["nodeSelector"] == GPU_NODE_LABELS  # Kueue's flavor, kept
        assert not pod["spec"].get("schedulingGates")
    gang = gangs.gang("train")
    assert gang["spec"]["source"] == "job" and gang["metadata"]["ownerReferences"][0]["kind"] == "Job"
    gangs.wait_finished("train")


def test_a_job_over_quota_waits_unplanned_and_is_placed_when_quota_frees(gangs: Gangs) -> None:
    queue = gangs.create_queue("one-node", {GPU_RESOURCE: "8", **ROOMY})
    try:
        gangs.create(batch_job("first", queue, gpus=8, scheduling_gates=[GATE, HOLD_GATE]))
        gangs.wait_admitted("first")
        gangs.wait_gated("first", 1)
        gangs.create(batch_job("second", queue, gpus=8, scheduling_gates=[GATE]))
        gangs.wait_pending("second")
        # While Kueue holds it back: no pod, so nothing for gputopo to plan; the first, held by another gate, is
        # not planned either.
        assert not gangs.pods("second") and not gangs.gang("second")
        assert not gangs.status("first").get("ranks")
        assert "waiting for gputopo.io/test-hold" in gangs.status("first").get("message", "")

        gangs.delete("first")
        gangs.wait_admitted("second")
        status = gangs.wait_planned("second", 1)
        (pod,) = gangs.wait_bound("second", 1)
        assert pod["spec"]["nodeName"] == status["ranks"][0]["node"]
        assert "gputopo.io/gpus" in _annotations(pod)
    finally:
        gangs.delete_all()
        gangs.delete_queue(queue)


def test_kueue_preemption_across_queues_frees_the_gangs_gpus_and_its_preemptor_is_placed_on_them(
    gangs: Gangs, box: SandboxHandle
) -> None:
    # Two ClusterQueues of one cohort, 8 GPUs each: team-a borrows team-b's 8 while team-b does not use them, and
    # team-b takes them back (reclaimWithinCohort) when it needs them.
    a = gangs.create_queue("team-a", {GPU_RESOURCE: "8", **ROOMY}, cohort="kueue-gangs")
    b = gangs.create_queue(
        "team-b", {GPU_RESOURCE: "8", **ROOMY}, cohort="kueue-gangs", preemption={"reclaimWithinCohort": "Any"}
    )
    try:
        gangs.create(batch_job("victim", a, pods=2, gpus=8, scheduling_gates=[GATE], affinity=UNBINDABLE))
        gangs.wait_admitted("victim")
        planned = gangs.wait_planned("victim", 2)
        victim_gpus = _held(planned)
        assert len(victim_gpus) == NODES * GPUS_PER_NODE  # every GPU of the sandbox
        victim_pods = {p["metadata"]["name"] for p in gangs.wait_steered("victim", 2)}

        gangs.create(batch_job("preemptor", b, pods=1, gpus=8, scheduling_gates=[GATE]))
        # Kueue evicts the victim (its Job suspended, its pods deleted); gputopo lets the plan go at once (kwok
        # deletes a pod as soon as it is deleting, so here the pods are gone by then; the unit tests cover pods that
        # take their grace period).
        released = gangs.wait_phase("victim", "Released", timeout=30)
        assert not released.get("ranks") and released["gpuCount"] == 0
        evicted = gangs.workload("victim")
        assert evicted is not None and (gangs.job("victim") or {})["spec"]["suspend"] is True
        gangs.wait(
            "the victim's pods gone", lambda: not box.get_json("pods", "-n", NS, "-l", "job-name=victim")["items"]
        )

        gangs.wait_admitted("preemptor")
        status = gangs.wait_planned("preemptor", 1)
        assert _held(status) <= victim_gpus
        gangs.wait_bound("preemptor", 1)

        # The preemptor ran (kwok ends it) and gave team-b's quota back: Kueue admits the victim again, and gputopo
        # places it again with new pods.
        gangs.wait_admitted("victim", timeout=90)
        again = gangs.wait_planned("victim", 2)
        assert again["generation"] == planned["generation"] + 1
        assert not victim_pods & {p["metadata"]["name"] for p in gangs.wait_steered("victim", 2)}
    finally:
        gangs.delete_all()
        gangs.delete_queue(a)
        gangs.delete_queue(b)
    # Nothing is left of the victim: its GangPlacement goes with its Job.
    gangs.wait("the victim's GangPlacement gone", lambda: not gangs.gang("victim"), timeout=90)


def test_a_deactivated_workloads_gang_frees_its_gpus_at_once_and_is_placed_again_when_active(gangs: Gangs) -> None:
    # A finalizer of the test's keeps each deleted pod terminating, as a real pod's grace period would.
    job = batch_job(
        "paused", GPUTOPO_QUEUE, pods=2, gpus=8, scheduling_gates=[GATE], affinity=UNBINDABLE, pod_finalizers=[LINGER]
    )
    gangs.create(job)
    gangs.wait_admitted("paused")
    planned = gangs.wait_planned("paused", 2)
    gangs.wait_steered("paused", 2)
    gangs.deactivate("paused")
    released = gangs.wait_phase("paused", "Released", timeout=30)
    assert released["gpuCount"] == 0 and not released.get("ranks")
    assert "Kueue evicted or deactivated it" in released["message"]
    # Let go while the evicted pods are still terminating, not once they are gone.
    terminating = box_pods(gangs, "job-name=paused")
    assert len(terminating) == 2 and all(p["metadata"].get("deletionTimestamp") for p in terminating)
    gangs.release_pods(LINGER)
    gangs.wait("the paused Job's pods gone", lambda: not box_pods(gangs, "job-name=paused"))
    gangs.deactivate("paused", active=True)
    gangs.wait_admitted("paused")
    again = gangs.wait_planned("paused", 2)
    assert again["generation"] == planned["generation"] + 1
    gangs.wait_steered("paused", 2)


def test_a_job_on_the_tas_flavor_is_left_to_kueue(gangs: Gangs) -> None:
    # Two 4-GPU pods on one host: Kueue's TAS picks the host and pins each pod to it.
    job = batch_job(
        "tas", TAS_QUEUE, pods=2, gpus=4, scheduling_gates=[GATE], pod_annotations={REQUIRED_TOPOLOGY: HOSTNAME}
    )
    gangs.create(job)
    workload = gangs.wait_admitted("tas")
    assert workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    status = gangs.wait_phase("tas", "PlacedByKueue", "Released")
    pods = gangs.wait_bound("tas", 2)
    assert len({p["spec"]["nodeName"] for p in pods}) == 1
    for pod in pods:
        assert pod["spec"]["nodeSelector"][HOSTNAME] == pod["spec"]["nodeName"]  # where Kueue put it
        assert not _pinned_to(pod) and "gputopo.io/gpus" not in _annotations(pod)
        assert not _gated(pod, GATE) and not _gated(pod, TOPOLOGY_GATE)
    assert not status.get("ranks") and status.get("gpuCount", 0) == 0
    # The gang may be Released already (kwok ends the pods once they run); the Event on the Job stays.
    events = gangs.wait("the Job told it is placed by Kueue", lambda: gangs.events("tas", "GangPlacedByKueue"))
    assert "Topology-Aware Scheduling" in events[0]["message"] and workload["metadata"]["name"] in events[0]["message"]


def test_kill_9_while_admitted_gangs_are_gated_leaves_no_pod_gated_and_no_gpu_planned_twice(gangs: Gangs) -> None:
    gangs.operator.kill()
    try:
        for name in ("one", "two"):
            gangs.create(batch_job(name, GPUTOPO_QUEUE, pods=1, gpus=8, scheduling_gates=[GATE], affinity=UNBINDABLE))
        for name in ("one", "two"):
            gangs.wait_admitted(name)
            gangs.wait_gated(name, 1)
    finally:
        gangs.operator.start()
    taken: dict[tuple[str, int], str] = {}
    for name in ("one", "two"):
        status = gangs.wait_planned(name, 1, timeout=90)
        (pod,) = gangs.wait_steered(name, 1)
        gpus = [int(g) for g in _annotations(pod)["gputopo.io/gpus"].split(",")]
        assert _pinned_to(pod) == [status["ranks"][0]["node"]]
        for gpu in gpus:
            where = (status["ranks"][0]["node"], gpu)
            assert where not in taken, f"{where} planned for {taken.get(where)} and {name}"
            taken[where] = name


def test_a_kueue_pod_group_waits_for_admission_unplanned_then_runs_where_gputopo_placed_it(gangs: Gangs) -> None:
    gangs.create(group_pod("pg-0", "pg", 2, GPUTOPO_QUEUE, scheduling_gates=[GATE]))
    # One pod of two: Kueue makes no Workload until the group is whole, and its admission gate holds the pod.
    waiting = gangs.wait_phase("kueue/pg", "Pending")
    assert "kueue.x-k8s.io/admission" in waiting["message"] and not waiting.get("ranks")
    (first,) = gangs.group_pods("pg")
    assert _gated(first, "kueue.x-k8s.io/admission") and _gated(first, GATE) and not _pinned_to(first)

    gangs.create(group_pod("pg-1", "pg", 2, GPUTOPO_QUEUE, scheduling_gates=[GATE]))
    status = gangs.wait_phase("kueue/pg", "Running")
    assert status["gpuCount"] == 16 and sorted(r["rank"] for r in status["ranks"]) == [0, 1]
    plan = {r["pod"]: r for r in status["ranks"]}
    for pod in gangs.group_pods("pg"):
        assert pod["spec"]["nodeName"] == plan[pod["metadata"]["name"]]["node"] == _pinned_to(pod)[0]
        assert not pod["spec"].get("schedulingGates")

    # Kueue stops the deactivated workload by deleting its pods: the plan is let go and nothing is left running.
    gangs.set_active("pg", False)
    released = gangs.wait_phase("kueue/pg", "Released", timeout=30)
    assert released["gpuCount"] == 0 and not released.get("ranks")
    gangs.wait("the group's pods gone", lambda: not gangs.group_pods("pg"))
