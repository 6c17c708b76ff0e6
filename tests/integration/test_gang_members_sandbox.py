"""Gangs whose pods do not all take GPUs, share a PodGroup between Jobs, or outnumber the group's ``minCount``, on the
sandbox's real kube-apiserver, kube-scheduler and kube-controller-manager, submitted as users submit them.

The chart's admission policy (installed by the sandbox) gates only pods that ask for GPUs, so a launcher or a leader
without GPUs runs ungated; the GPU pods here also name the gate in their template, as in ``test_gangs_sandbox``.
Jobs are made by the real Job controller (whose pods kwok ends as soon as they run); the pods of a LeaderWorkerSet
and of an MPIJob are made here with the names, labels and owner references those controllers give them, next to
their owner objects under minimal CRDs of the same group, version and kind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stand_in_crds import crd, installed

from gputopo.sandbox.harness import OperatorProcess, namespaced_operator, wait_for
from gputopo.sandbox.testing import SandboxHandle

NS = "gang-members-test"
GATE = "gputopo.io/placement"
ARRIVAL = 12  # seconds a plan waits for its ranks before it is let go
OWNER_CRDS = (
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    ("kubeflow.org", "v1", "MPIJob", "mpijobs"),
)


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    crds = [crd(group, version, plural, kind) for group, version, kind, plural in OWNER_CRDS]
    log_file = tmp_path_factory.mktemp("gang-members") / "operator.log"
    settings = {"GPUTOPO_GANG_ARRIVAL_TIMEOUT_SECONDS": str(ARRIVAL), "GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "20"}
    with (
        installed(sandbox.kubectl, crds),
        namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, settings) as proc,
    ):
        yield proc


class Cluster:
    def __init__(self, sandbox: SandboxHandle, operator: OperatorProcess) -> None:
        self.sandbox, self.operator = sandbox, operator

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = json.loads(
            self.sandbox.kubectl("create", "-n", NS, "-o", "json", "-f", "-", input=json.dumps(obj))
        )
        return created

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out = self.sandbox.kubectl("get", kind, name, "-n", NS, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else {}

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.sandbox.kubectl("get", "pods", "-n", NS, "-o", "json", "-l", selector)
        )["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def wait(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        try:
            return wait_for(what, predicate, timeout=timeout, every=0.3)
        except AssertionError:
            print(self.operator.log_tail(60))
            raise

    def status(self, gang: str) -> dict[str, Any]:
        return self.get("gangplacement", gang).get("status") or {}

    def wait_phase(self, gang: str, *phases: str, timeout: float = 60.0) -> dict[str, Any]:
        """The record once its phase is one of ``phases`` with ranks planned."""

        def reached() -> dict[str, Any] | None:
            s = self.status(gang)
            return s if s.get("phase") in phases and s.get("ranks") else None

        found: dict[str, Any] = self.wait(f"gang {gang} {'/'.join(phases)} (now {self.status(gang)})", reached, timeout)
        return found

    def reasons(self, involved: str) -> set[str]:
        out = self.sandbox.kubectl(
            "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={involved}", "-o", "json"
        )
        return {e.get("reason", "") for e in json.loads(out)["items"]}

    def never_let_go(self, gang: str, involved: str) -> dict[str, Any]:
        """The record past the arrival timeout: not let go for a rank that never came."""
        time.sleep(ARRIVAL + 4)
        status = self.status(gang)
        assert "did not arrive" not in status.get("message", ""), status
        assert "GangIncomplete" not in self.reasons(involved)
        return status

    def clean(self) -> None:
        for kind in ("jobs", "jobsets", "leaderworkersets", "mpijobs", "podgroups", "pods", "gangplacements"):
            self.sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)

        def emptied() -> bool:
            pods = json.loads(self.sandbox.kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
            out = self.sandbox.kubectl("get", "gangplacements", "-n", NS, "-o", "json", check=False)
            return not pods and not (out.strip().startswith("{") and json.loads(out)["items"])

        self.wait("namespace emptied", emptied)


@pytest.fixture
def cluster(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Cluster]:
    handle = Cluster(sandbox, operator)
    yield handle
    handle.clean()
    assert operator.running, operator.log_tail()


def _container(gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": "main", "image": "trainer:1", "resources": {"limits": limits}}


def _pod_spec(gpus: int, group: str | None = None) -> dict[str, Any]:
    """A pod spec; one that takes GPUs names gputopo's gate, one that takes none is left as the policy leaves it."""
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [_container(gpus)]}
    if gpus:
        spec["schedulingGates"] = [{"name": GATE}]
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return spec


def _indexed_job(name: str, pods: int, gpus: int, group: str | None = None, **meta: Any) -> dict[str, Any]:
    template = {"metadata": {"labels": dict(meta.pop("template_labels", {}))}, "spec": _pod_spec(gpus, group)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **meta},
        "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "template": template},
    }


def _podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _bound(cluster: Cluster, name: str) -> dict[str, Any]:
    def bound() -> dict[str, Any] | None:
        pod = cluster.get("pod", name)
        return pod if pod.get("spec", {}).get("nodeName") else None

    pod: dict[str, Any] = cluster.wait(f"pod {name} bound", bound)
    return pod


def test_a_jobset_with_a_cpu_launcher_is_placed_and_not_let_go_for_its_launcher(cluster: Cluster) -> None:
    rjobs = [("launcher", 1, 0), ("workers", 2, 4)]
    jobset = cluster.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "jsl"},
            "spec": {
                "replicatedJobs": [
                    {"name": name, "replicas": 1,
                     "template": {"spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                                           "template": {"spec": _pod_spec(gpus)}}}}
                    for name, pods, gpus in rjobs
                ]
            },
        }
    )  # fmt: skip
    uid = jobset["metadata"]["uid"]
    for global_index, (rjob, pods, gpus) in enumerate(rjobs):
        # jobset pkg/controllers/jobset_controller.go labelAndAnnotateObject: on the child Job and its pod template.
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "jsl",
            "jobset.sigs.k8s.io/jobset-uid": uid,
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
            "jobset.sigs.k8s.io/global-replicas": str(len(rjobs)),
            "jobset.sigs.k8s.io/job-index": "0",
            "jobset.sigs.k8s.io/job-global-index": str(global_index),
            "jobset.sigs.k8s.io/restart-attempt": "0",
        }
        job = _indexed_job(f"jsl-{rjob}-0", pods, gpus, labels=labels, template_labels=labels)
        job["metadata"]["annotations"] = dict(labels)
        job["metadata"]["ownerReferences"] = [_owner(jobset)]
        cluster.create(job)
    placed = cluster.wait_phase("jobset-jsl", "Running", "Released")
    assert sorted(r["rank"] for r in placed["ranks"]) == [1, 2]
    assert placed.get("missingRanks", []) == []
    (launcher,) = cluster.pods("job-name=jsl-launcher-0")
    assert not launcher["spec"].get("schedulingGates")
    cluster.never_let_go("jobset-jsl", "jsl")


def test_a_leaderworkerset_with_a_cpu_leader_runs_and_stays_running(cluster: Cluster) -> None:
    lws = cluster.create(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lwc"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 3,
                    "leaderTemplate": {"spec": _pod_spec(0)},
                    "workerTemplate": {"spec": _pod_spec(4)},
                },
            },
        }
    )

    def member(worker: int) -> dict[str, Any]:
        """``lwc-0`` (the leader, worker 0) or ``lwc-0-<i>``, labelled and annotated as LWS's pod webhook does."""
        labels = {
            "leaderworkerset.sigs.k8s.io/name": "lwc",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        }
        annotations = {"leaderworkerset.sigs.k8s.io/size": "3"}
        if worker:
            annotations["leaderworkerset.sigs.k8s.io/leader-name"] = "lwc-0"
        meta = {"name": "lwc-0" if worker == 0 else f"lwc-0-{worker}", "labels": labels, "annotations": annotations,
                "ownerReferences": [_owner(lws)]}  # fmt: skip
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _pod_spec(4 if worker else 0)}

    cluster.create(member(0))
    leader = _bound(cluster, "lwc-0")  # LWS makes the workers once the leader exists
    assert not leader["spec"].get("schedulingGates")
    for worker in (1, 2):
        cluster.create(member(worker))
    running = cluster.wait_phase("leaderworkerset-lwc-0", "Running")
    assert sorted(r["rank"] for r in running["ranks"]) == [1, 2]
    still = cluster.never_let_go("leaderworkerset-lwc-0", "lwc")
    assert still["phase"] == "Running" and still.get("missingRanks", []) == []


def test_an_mpijob_shaped_podgroup_runs_and_stays_running(cluster: Cluster) -> None:
    cluster.create(_podgroup("mpi", 3))
    mpijob = cluster.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "MPIJob",
            "metadata": {"name": "mpi"},
            "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}},
        }
    )

    def made(name: str, rtype: str, gpus: int, **labels: str) -> dict[str, Any]:
        """As training-operator v1.9 pkg/controller.v1/mpi makes them: ``<job>-launcher``, ``<job>-worker-<i>``."""
        meta = {
            "name": name,
            "labels": {"training.kubeflow.org/operator-name": "mpijob-controller",
                       "training.kubeflow.org/job-name": "mpi", "training.kubeflow.org/replica-type": rtype, **labels},
            "ownerReferences": [_owner(mpijob)],
        }  # fmt: skip
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _pod_spec(gpus, "mpi")}

    cluster.create(made("mpi-launcher", "launcher", 0, **{"training.kubeflow.org/job-role": "master"}))
    for i in range(2):
        cluster.create(made(f"mpi-worker-{i}", "worker", 4, **{"training.kubeflow.org/replica-index": str(i)}))
    running = cluster.wait_phase("podgroup-mpi", "Running")
    assert {r["rank"]: r["pod"] for r in running["ranks"]} == {0: "mpi-worker-0", 1: "mpi-worker-1"}
    _bound(cluster, "mpi-launcher")
    still = cluster.never_let_go("podgroup-mpi", "mpi-worker-0")
    assert still["phase"] == "Running"


def test_a_launcher_job_and_a_worker_job_sharing_a_podgroup_are_one_gang(cluster: Cluster) -> None:
    cluster.create(_podgroup("pair", 3))
    cluster.create(_indexed_job("pair-launcher", 1, 1, "pair"))  # completion index 0, as is worker 0
    cluster.create(_indexed_job("pair-worker", 2, 4, "pair"))
    placed = cluster.wait_phase("podgroup-pair", "Running", "Released")
    by_rank = {r["rank"]: r["pod"].rsplit("-", 2)[0] for r in placed["ranks"]}
    assert by_rank == {0: "pair-launcher", 1: "pair-worker", 2: "pair-worker"}  # owners by name, then index
    assert sorted(len(r["gpus"]) for r in placed["ranks"]) == [1, 4, 4]


def test_a_podgroup_below_its_jobs_parallelism_places_every_pod_the_job_makes(cluster: Cluster) -> None:
    cluster.create(_podgroup("wide", 2))
    cluster.create(_indexed_job("wide", 4, 2, "wide"))
    placed = cluster.wait_phase("podgroup-wide", "Running", "Released")
    assert sorted(r["rank"] for r in placed["ranks"]) == [0, 1, 2, 3]

    def all_let_through() -> list[dict[str, Any]] | None:
        pods = cluster.pods("job-name=wide")
        return pods if len(pods) == 4 and all(GATE not in str(p["spec"].get("schedulingGates")) for p in pods) else None

    cluster.wait("every pod of the Job ungated", all_let_through)
