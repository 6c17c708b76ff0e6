"""Gangs gputopo does not own, on the sandbox's real kube-apiserver, kube-scheduler and kube-controller-manager.

The pods carry the gate ``gputopo.io/placement`` in their template, as the chart's admission policy gives them
(``test_admission_policy`` proves the policy; here every other module's pods must stay ungated). Jobs are made by
the real Job controller; pods of JobSets, LeaderWorkerSets and PyTorchJobs are made here with the labels, names
and owner references those controllers give them (their controllers are not in the Go module proxy), next to
their owner objects under minimal CRDs of the same group, version and kind.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from stand_in_crds import crd, installed

from gputopo.sandbox.faults import link_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespaced_operator, priority_classes, training_job, wait_for
from gputopo.sandbox.testing import SandboxHandle

NS = "gangs-test"
RETENTION = 30  # seconds the record of a gang with no owner is kept once its pods are gone
GATE = "gputopo.io/placement"
OWNER_CRDS = (
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
)


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    crds = [crd(group, version, plural, kind) for group, version, kind, plural in OWNER_CRDS]
    log_file = tmp_path_factory.mktemp("gangs") / "operator.log"
    settings = {
        "GPUTOPO_GANG_ARRIVAL_TIMEOUT_SECONDS": "12",
        "GPUTOPO_GANG_PHANTOM_HEADROOM_RANKS": "64",  # bare pods' gangs planned before all their pods exist
        "GPUTOPO_GANG_RECORD_RETENTION_SECONDS": str(RETENTION),
        "GPUTOPO_QUARANTINE_SECONDS": "30",
        "GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "20",
    }
    with (
        installed(sandbox.kubectl, crds),
        namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, settings) as proc,
    ):
        yield proc


class Cluster:
    def __init__(self, sandbox: SandboxHandle, operator: OperatorProcess) -> None:
        self.sandbox, self.operator = sandbox, operator

    def apply(self, *objects: dict[str, Any]) -> None:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self.sandbox.kubectl("apply", "-n", NS, "--server-side", "--force-conflicts", "-f", "-", input=text)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = self.sandbox.kubectl("create", "-n", NS, "-o", "json", "-f", "-", input=json.dumps(obj))
        created: dict[str, Any] = json.loads(out)
        return created

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        out = self.sandbox.kubectl("get", kind, name, "-n", NS, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", "pods", "-n", NS, "-o", "json"] + (["-l", selector] if selector else [])
        items: list[dict[str, Any]] = json.loads(self.sandbox.kubectl(*args))["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def gang(self, name: str) -> dict[str, Any]:
        return self.get("gangplacement", name) or {}

    def wait(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        try:
            return wait_for(what, predicate, timeout=timeout, every=0.3)
        except AssertionError:
            print(self.operator.log_tail(60))
            raise

    def wait_phase(self, name: str, phase: str, timeout: float = 60.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            g = self.gang(name)
            return g if (g.get("status") or {}).get("phase") == phase else None

        result: dict[str, Any] = self.wait(
            f"gang {name} {phase} (now {self.gang(name).get('status')})", reached, timeout
        )
        return result

    def wait_placed(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """Running, or already Released because every pod ended (kwok completes a Job's pods once they run):
        either way the record says where each rank ran."""

        def placed() -> dict[str, Any] | None:
            g = self.gang(name)
            status = g.get("status") or {}
            return g if status.get("phase") in ("Running", "Released") and status.get("ranks") else None

        result: dict[str, Any] = self.wait(f"gang {name} placed", placed, timeout)
        return result

    def events(self, name: str) -> list[dict[str, Any]]:
        out = self.sandbox.kubectl(
            "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def reasons(self, name: str) -> set[str]:
        return {e.get("reason", "") for e in self.events(name)}

    def clean(self) -> None:
        for kind in ("jobs", "jobsets", "leaderworkersets", "pytorchjobs", "podgroups", "pods", "gangplacements"):
            self.sandbox.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", "--grace-period=0", check=False)
        self.wait("namespace emptied", lambda: not self.pods() and not self._gangs(), timeout=60)

    def _gangs(self) -> list[Any]:
        out = self.sandbox.kubectl("get", "gangplacements", "-n", NS, "-o", "json", check=False)
        return list(json.loads(out)["items"]) if out.strip().startswith("{") else []


@pytest.fixture
def cluster(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Cluster]:
    handle = Cluster(sandbox, operator)
    yield handle
    handle.clean()
    assert operator.running, operator.log_tail()


def _container(gpus: int, **extra: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": "trainer", "image": "pytorch", "resources": {"limits": limits}, **extra}


def _template(gpus: int, annotations: dict[str, str] | None = None, gated: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [_container(gpus)]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def indexed_job(name: str, pods: int, gpus: int, **extra: Any) -> dict[str, Any]:
    template = extra.pop("template", None) or _template(gpus, extra.pop("annotations", None))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 6,
            "template": template,
            **extra,
        },
    }


def _planned_and_bound(cluster: Cluster, gang: dict[str, Any], selector: str) -> list[dict[str, Any]]:
    """Every rank's pod bound where the record plans it, with the planned GPUs, ungated."""
    ranks = {r["rank"]: r for r in gang["status"]["ranks"]}

    def bound() -> list[dict[str, Any]] | None:
        pods = cluster.pods(selector)
        ok = [p for p in pods if p["spec"].get("nodeName")]
        return pods if pods and len(ok) == len(pods) else None

    pods: list[dict[str, Any]] = cluster.wait(f"pods of {selector} bound", bound)
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        rank = next(r for r in ranks.values() if r["pod"] == pod["metadata"]["name"])
        assert pod["spec"]["nodeName"] == rank["node"]
        assert annotations["gputopo.io/gpus"] == ",".join(map(str, rank["gpus"]))
        assert not [g for g in pod["spec"].get("schedulingGates") or [] if g["name"] == GATE]
    return pods


def test_an_indexed_job_is_planned_whole_and_each_rank_lands_on_its_plan(cluster: Cluster) -> None:
    cluster.apply(indexed_job("idx", 2, 4, annotations={"gputopo.io/intra-node": "nvswitch"}))
    gang = cluster.wait_placed("job-idx")
    assert gang["spec"]["source"] == "job" and gang["spec"]["size"] == 2
    assert gang["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert sorted(r["rank"] for r in gang["status"]["ranks"]) == [0, 1]
    assert gang["status"]["estimatedBusBandwidthGBps"] > 0
    _planned_and_bound(cluster, gang, "job-name=idx")
    assert "GangPlaced" in cluster.reasons("idx")


def test_a_job_with_a_gang_policy_is_placed_through_the_podgroup_its_controller_makes(cluster: Cluster) -> None:
    job = indexed_job("pg", 2, 4, scheduling={"schedulingPolicy": {"gang": {"minCount": 2}}})
    cluster.apply(job)
    pods = cluster.wait("pods of pg", lambda: (p := cluster.pods("job-name=pg")) and len(p) == 2 and p)
    group = pods[0]["spec"]["schedulingGroup"]["podGroupName"]
    gang = cluster.wait_placed(f"podgroup-{group}")
    assert gang["spec"]["source"] == "podgroup"
    _planned_and_bound(cluster, gang, "job-name=pg")


def _lws_pod(lws: dict[str, Any], worker: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of group 0 of ``lws`` as LeaderWorkerSet makes it: the leader ``<lws>-0``, workers ``<lws>-0-<i>``."""
    name = lws["metadata"]["name"]
    labels = {
        "leaderworkerset.sigs.k8s.io/name": name,
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }
    owner = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name,
             "uid": lws["metadata"]["uid"]}  # fmt: skip
    meta = {
        "name": f"{name}-0" if worker == 0 else f"{name}-0-{worker}",
        "labels": labels,
        "annotations": {"leaderworkerset.sigs.k8s.io/size": "2", **(annotations or {})},
        "ownerReferences": [owner],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _template(4)["spec"]}


def test_a_leaderworkerset_group_takes_its_leader_first_and_its_worker_into_the_held_plan(cluster: Cluster) -> None:
    lws = cluster.create(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": _template(4)}},
        }
    )

    def member(worker: int) -> dict[str, Any]:
        return _lws_pod(lws, worker)

    cluster.create(member(0))
    planned = cluster.wait_phase("leaderworkerset-lws-0", "Planned")
    assert planned["status"]["missingRanks"] == [1]
    held = {r["rank"]: r["node"] for r in planned["status"]["ranks"]}
    cluster.wait("leader bound", lambda: (p := cluster.get("pod", "lws-0")) and p["spec"].get("nodeName"))
    cluster.create(member(1))  # LWS makes its workers once the leader is placed
    running = cluster.wait_phase("leaderworkerset-lws-0", "Running")
    assert {r["rank"]: r["node"] for r in running["status"]["ranks"]} == held
    assert running["status"]["generation"] == planned["status"]["generation"]  # not planned again
    worker = cluster.get("pod", "lws-0-1")
    assert worker is not None and worker["spec"]["nodeName"] == held[1]


def test_a_jobset_placed_from_the_jobs_its_controller_would_make(cluster: Cluster) -> None:
    jobset = cluster.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 2,
                        "template": {"spec": {"parallelism": 1, "completions": 1, "template": _template(4)}},
                    }
                ]
            },
        }
    )
    uid = jobset["metadata"]["uid"]
    for index in range(2):
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "js",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
            "jobset.sigs.k8s.io/job-index": str(index),
            "jobset.sigs.k8s.io/job-global-index": str(index),
            "jobset.sigs.k8s.io/jobset-uid": uid,
        }
        template = _template(4)
        template["metadata"]["labels"] = labels
        job = indexed_job(f"js-workers-{index}", 1, 4, template=template)
        job["metadata"]["labels"] = labels
        job["metadata"]["ownerReferences"] = [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": uid, "controller": True}
        ]
        cluster.create(job)
    gang = cluster.wait_placed("jobset-js")
    assert gang["spec"]["size"] == 2
    _planned_and_bound(cluster, gang, "jobset.sigs.k8s.io/jobset-name=js")


def _pytorchjob(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template = _template(gpus, annotations)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 1, "template": template},
            }
        },
    }


def _pytorch_pods(job: dict[str, Any], gpus: int, annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Its master and worker pods as the training-operator makes them: ``<job>-<type>-<index>``, its labels."""
    name = job["metadata"]["name"]
    pods = []
    for kind, index in (("master", 0), ("worker", 0)):
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": kind,
            "training.kubeflow.org/replica-index": str(index),
        }
        if kind == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        owner = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
        meta = {"name": f"{name}-{kind}-{index}", "labels": labels, "ownerReferences": [owner]}
        meta["annotations"] = dict(annotations or {})
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _template(gpus)["spec"]})
    return pods


def test_a_pytorchjob_master_is_rank_zero_and_its_worker_rank_one(cluster: Cluster) -> None:
    job = cluster.create(_pytorchjob("pt", 4))
    for pod in _pytorch_pods(job, 4):
        cluster.create(pod)
    gang = cluster.wait_phase("pytorchjob-pt", "Running")
    by_rank = {r["rank"]: r["pod"] for r in gang["status"]["ranks"]}
    assert by_rank == {0: "pt-master-0", 1: "pt-worker-0"}


def _contract_pod(name: str, gang: str, size: int, rank: int, gpus: int, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"gputopo.io/gang": gang, "gputopo.io/gang-size": str(size), "gputopo.io/rank": str(rank)},
            "annotations": annotations,
        },
        "spec": _template(gpus)["spec"],
    }


def test_a_launcher_without_gpus_goes_unpinned_and_the_workers_are_placed(cluster: Cluster) -> None:
    shape = {"gputopo.io/gpus-per-rank": "0,4,4"}
    cluster.create(_contract_pod("mpi-launcher", "mpi", 3, 0, 0, **shape))
    for rank in (1, 2):
        cluster.create(_contract_pod(f"mpi-worker-{rank}", "mpi", 3, rank, 4, **shape))
    gang = cluster.wait_phase("gputopo-mpi", "Running")
    assert sorted(r["rank"] for r in gang["status"]["ranks"]) == [1, 2]
    launcher = cluster.wait(
        "launcher bound", lambda: (p := cluster.get("pod", "mpi-launcher")) and p["spec"].get("nodeName") and p
    )
    assert not launcher["spec"].get("schedulingGates")
    assert "gputopo.io/gpus" not in (launcher["metadata"].get("annotations") or {})


def test_a_link_fault_evicts_the_gang_and_its_remade_pods_are_placed_off_the_fault(
    sandbox: SandboxHandle, cluster: Cluster
) -> None:
    job = cluster.create(_pytorchjob("ptf", 4, {"gputopo.io/intra-node": "nvswitch"}))
    for pod in _pytorch_pods(job, 4, {"gputopo.io/intra-node": "nvswitch"}):
        cluster.create(pod)
    gang = cluster.wait_phase("pytorchjob-ptf", "Running")
    rank0 = next(r for r in gang["status"]["ranks"] if r["rank"] == 0)
    old = {p["metadata"]["uid"] for p in cluster.pods("training.kubeflow.org/job-name=ptf")}
    a, b = rank0["gpus"][:2]
    link_fault(sandbox.sandbox, rank0["node"], a, b, "down")
    try:
        cluster.wait("pods evicted", lambda: not cluster.pods("training.kubeflow.org/job-name=ptf"), timeout=60)
        restarting = cluster.gang("pytorchjob-ptf")
        assert restarting["status"]["restarts"] == 1
        assert "LinkDown" in restarting["status"]["lastRestartReason"]
        for pod in _pytorch_pods(job, 4, {"gputopo.io/intra-node": "nvswitch"}):  # as training-operator remakes them
            cluster.create(pod)
        after = cluster.wait_phase("pytorchjob-ptf", "Running", timeout=60)
        assert rank0["node"] not in after["status"]["nodes"]
        assert after["status"]["generation"] > gang["status"]["generation"]
        pods = _planned_and_bound(cluster, after, "training.kubeflow.org/job-name=ptf")
        assert not old & {p["metadata"]["uid"] for p in pods}
        assert "GangRestarting" in cluster.reasons("ptf")
    finally:
        link_fault(sandbox.sandbox, rank0["node"], a, b, "up")


def test_bare_pods_under_a_fault_are_reported_not_evicted(sandbox: SandboxHandle, cluster: Cluster) -> None:
    for rank in (0, 1):
        cluster.create(_contract_pod(f"bare-{rank}", "bare", 2, rank, 4, **{"gputopo.io/intra-node": "nvswitch"}))
    gang = cluster.wait_phase("gputopo-bare", "Running")
    rank0 = next(r for r in gang["status"]["ranks"] if r["rank"] == 0)
    a, b = rank0["gpus"][:2]
    link_fault(sandbox.sandbox, rank0["node"], a, b, "down")
    try:
        cluster.wait(
            "fault reported",
            lambda: "gputopo.io/evict-bare-pods" in cluster.gang("gputopo-bare")["status"].get("message", ""),
            timeout=60,
        )
        assert len(cluster.pods("gputopo.io/gang=bare")) == 2  # nobody would make them again: not evicted
    finally:
        link_fault(sandbox.sandbox, rank0["node"], a, b, "up")


def test_kill_9_between_plan_and_ungating_leaves_no_pod_gated_and_no_gpu_planned_twice(
    sandbox: SandboxHandle, cluster: Cluster
) -> None:
    names = [f"burst-{i}" for i in range(5)]
    for name in names:
        for rank in (0, 1):
            cluster.create(_contract_pod(f"{name}-{rank}", name, 2, rank, 2))
    cluster.wait("a first plan recorded", lambda: cluster._gangs(), timeout=60)
    cluster.operator.kill()
    cluster.operator.start()
    for name in names:
        cluster.wait_phase(f"gputopo-{name}", "Running", timeout=90)
    pods = [p for name in names for p in cluster.pods(f"gputopo.io/gang={name}")]
    assert len(pods) == 10
    taken: set[tuple[str, int]] = set()
    for pod in pods:
        assert not pod["spec"].get("schedulingGates"), pod["metadata"]["name"]
        gpus = [int(g) for g in pod["metadata"]["annotations"]["gputopo.io/gpus"].split(",")]
        for gpu in gpus:
            assert (pod["spec"]["nodeName"], gpu) not in taken
            taken.add((pod["spec"]["nodeName"], gpu))


def test_a_garbage_annotation_refuses_the_gang_naming_it(cluster: Cluster) -> None:
    cluster.apply(indexed_job("garbage", 2, 4, annotations={"gputopo.io/min-bus-bandwidth": "fast"}))
    gang = cluster.wait_phase("job-garbage", "Refused")
    assert "gputopo.io/min-bus-bandwidth" in gang["status"]["message"]
    assert "GangRefused" in cluster.reasons("garbage")
    assert all(GATE in {g["name"] for g in p["spec"]["schedulingGates"]} for p in cluster.pods("job-name=garbage"))


def test_a_gang_larger_than_the_cluster_is_unplaceable_with_the_reason(cluster: Cluster) -> None:
    cluster.apply(indexed_job("huge", 64, 8))
    gang = cluster.wait_phase("job-huge", "Unplaceable")
    assert gang["status"]["message"]
    assert not [p for p in cluster.pods("job-name=huge") if p["spec"].get("nodeName")]


def test_a_pod_that_names_two_gangs_is_refused_with_an_event_naming_both(cluster: Cluster) -> None:
    pod = _contract_pod("twice", "alpha", 1, 0, 1)
    pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "beta"
    cluster.create(pod)

    def told() -> list[dict[str, Any]]:
        return [e for e in cluster.events("twice") if e.get("reason") == "GangRefused"]

    events = cluster.wait("refusal told", told)
    assert "alpha" in events[0]["message"] and "beta" in events[0]["message"]
    still = cluster.get("pod", "twice")
    assert still is not None and GATE in {g["name"] for g in still["spec"]["schedulingGates"]}


def test_a_plan_whose_ranks_never_all_arrive_is_let_go_naming_them(cluster: Cluster) -> None:
    cluster.create(_contract_pod("lonely-0", "lonely", 2, 0, 4))
    cluster.wait_phase("gputopo-lonely", "Planned")
    gang = cluster.wait_phase("gputopo-lonely", "Released", timeout=40)
    assert gang["status"]["missingRanks"] == [1] and gang["status"].get("ranks", []) == []
    assert "ranks 1 did not arrive" in gang["status"]["message"]


def test_a_pod_held_by_another_gate_is_left_alone_until_that_gate_goes(cluster: Cluster) -> None:
    pod = _contract_pod("held-0", "held", 1, 0, 4)
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}, {"name": GATE}]
    cluster.create(pod)
    pending = cluster.wait_phase("gputopo-held", "Pending")
    assert "kueue.x-k8s.io/admission" in pending["status"]["message"]
    time.sleep(2)
    assert [g["name"] for g in cluster.get("pod", "held-0")["spec"]["schedulingGates"]] == [  # type: ignore[index]
        "kueue.x-k8s.io/admission",
        GATE,
    ]
    patch = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    cluster.sandbox.kubectl("patch", "pod", "held-0", "-n", NS, "--type", "json", "-p", json.dumps(patch))
    cluster.wait_phase("gputopo-held", "Running")


def _podgroup_pod(name: str, group: str, gpus: int) -> dict[str, Any]:
    spec = {**_template(gpus)["spec"], "schedulingGroup": {"podGroupName": group}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_a_podgroup_made_by_hand_is_placed_whole_and_a_fault_under_its_bare_pods_is_reported(
    sandbox: SandboxHandle, cluster: Cluster
) -> None:
    cluster.create(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "by-hand"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}},
        }
    )
    for i in (0, 1):
        cluster.create(_podgroup_pod(f"by-hand-{i}", "by-hand", 4))
    gang = cluster.wait_phase("podgroup-by-hand", "Running")
    assert gang["spec"]["source"] == "podgroup" and gang["spec"]["size"] == 2
    _planned_and_bound(cluster, gang, "")
    rank0 = next(r for r in gang["status"]["ranks"] if r["rank"] == 0)
    a, b = rank0["gpus"][:2]
    link_fault(sandbox.sandbox, rank0["node"], a, b, "down")
    try:
        cluster.wait(
            "fault reported",
            lambda: "evict-bare-pods" in cluster.gang("podgroup-by-hand")["status"].get("message", ""),
            timeout=60,
        )
        assert len(cluster.pods()) == 2
    finally:
        link_fault(sandbox.sandbox, rank0["node"], a, b, "up")


def test_a_leaderworkerset_group_under_a_fault_is_evicted_and_placed_off_it_when_remade(
    sandbox: SandboxHandle, cluster: Cluster
) -> None:
    lws = cluster.create(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lwf"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": _template(4)}},
        }
    )

    def member(worker: int) -> dict[str, Any]:
        return _lws_pod(lws, worker, {"gputopo.io/intra-node": "nvswitch"})

    for worker in (0, 1):
        cluster.create(member(worker))
    gang = cluster.wait_phase("leaderworkerset-lwf-0", "Running")
    rank1 = next(r for r in gang["status"]["ranks"] if r["rank"] == 1)
    a, b = rank1["gpus"][:2]
    link_fault(sandbox.sandbox, rank1["node"], a, b, "down")
    try:
        cluster.wait("pods evicted", lambda: not cluster.pods("leaderworkerset.sigs.k8s.io/name=lwf"), timeout=60)
        for worker in (0, 1):  # as LWS's StatefulSets make them again
            cluster.create(member(worker))
        after = cluster.wait_phase("leaderworkerset-lwf-0", "Running", timeout=60)
        assert after["status"]["restarts"] == 1
        moved = next(r for r in after["status"]["ranks"] if r["rank"] == 1)
        assert (moved["node"], {a, b} <= set(moved["gpus"])) != (rank1["node"], True)  # off the downed link
    finally:
        link_fault(sandbox.sandbox, rank1["node"], a, b, "up")


def test_a_gated_pod_deleted_or_changed_while_gated_is_read_again(cluster: Cluster) -> None:
    # refused for a garbage annotation; fixed in place while gated, it is planned
    cluster.create(_contract_pod("fix-0", "fix", 1, 0, 2, **{"gputopo.io/min-bus-bandwidth": "fast"}))
    cluster.wait_phase("gputopo-fix", "Refused")
    cluster.sandbox.kubectl("annotate", "pod", "fix-0", "-n", NS, "--overwrite", "gputopo.io/min-bus-bandwidth=10")
    cluster.wait_phase("gputopo-fix", "Running")
    # rank 1 deleted while another scheduler still holds it; made again, the gang is placed whole. Whether the gang
    # was planned from rank 0 before rank 1 came (then rank 1 waits on Kueue's gate) or waits for that gate to go
    # depends on which pass saw which pod first: both hold no pod of it bound.
    held = _contract_pod("gone-1", "gone", 2, 1, 2)
    held["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}, {"name": GATE}]
    cluster.create(held)
    cluster.create(_contract_pod("gone-0", "gone", 2, 0, 2))
    cluster.wait(
        "the gang seen", lambda: cluster.gang("gputopo-gone").get("status", {}).get("phase") in ("Pending", "Planned")
    )
    assert not [
        p
        for p in cluster.pods("gputopo.io/gang=gone")
        if p["spec"].get("nodeName") and p["metadata"]["name"] == "gone-1"
    ]
    cluster.sandbox.kubectl("delete", "pod", "gone-1", "-n", NS, "--wait=true")
    cluster.create(_contract_pod("gone-1", "gone", 2, 1, 2))
    gang = cluster.wait_phase("gputopo-gone", "Running")
    _planned_and_bound(cluster, gang, "gputopo.io/gang=gone")


def _pods_gone_at(gang: dict[str, Any]) -> float | None:
    stamp = (gang.get("status") or {}).get("podsGoneAt")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def _delete_pods(cluster: Cluster, selector: str) -> None:
    cluster.sandbox.kubectl("delete", "pods", "-n", NS, "-l", selector, "--grace-period=0", "--force", "--wait=true")


def test_a_bare_pod_gangs_record_goes_a_retention_time_after_its_last_pod_and_not_before(cluster: Cluster) -> None:
    """Counted from the stamp on the record, across an operator restart; a pod back before then keeps the record."""
    for rank in (0, 1):
        cluster.create(_contract_pod(f"brief-{rank}", "brief", 2, rank, 2))
    first = cluster.wait_phase("gputopo-brief", "Running")
    uid = first["metadata"]["uid"]
    assert not first["metadata"].get("ownerReferences")
    # its pods gone: released and stamped, kept
    _delete_pods(cluster, "gputopo.io/gang=brief")
    gone = cluster.wait("the record stamped", lambda: _pods_gone_at(g := cluster.gang("gputopo-brief")) and g)
    assert gone["status"]["phase"] == "Released" and not gone["status"].get("ranks")
    # a pod back before the retention: the same record, its stamp cleared, planned again
    for rank in (0, 1):
        cluster.create(_contract_pod(f"brief-{rank}", "brief", 2, rank, 2))
    back = cluster.wait_phase("gputopo-brief", "Running")
    assert back["metadata"]["uid"] == uid and back["status"]["generation"] == 2
    assert _pods_gone_at(back) is None
    # gone again: the retention counts from the new stamp
    _delete_pods(cluster, "gputopo.io/gang=brief")
    stamped = cluster.wait("stamped again", lambda: _pods_gone_at(cluster.gang("gputopo-brief")))
    due = stamped + RETENTION
    # an operator restart does not start the count again
    time.sleep(max(0.0, stamped + 10 - time.time()))
    cluster.operator.kill()
    cluster.operator.start()
    restarted = time.time()
    while time.time() < due - 1.5:
        kept = cluster.gang("gputopo-brief")
        assert kept.get("metadata", {}).get("uid") == uid, f"deleted {due - time.time():.1f}s before the retention"
        time.sleep(0.5)
    cluster.wait("the record deleted", lambda: not cluster.gang("gputopo-brief"), timeout=RETENTION)
    deleted = time.time()
    assert deleted < restarted + RETENTION, f"deleted {deleted - due:.1f}s after it was due: counted from the restart"
    print(
        f"due {due:.1f}, restarted {restarted - stamped:.1f}s after the stamp, deleted {deleted - due:.1f}s after due"
    )


# -- a JobSet of exclusive parts preempts --------------------------------------------------------------------------

POOL = "test.gputopo.io/pool"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LOW, HIGH = "gputopo-test-gangs-low", "gputopo-test-gangs-high"


def _low_job(name: str, nodes: list[str]) -> dict[str, Any]:
    """A low-priority TrainingJob of one 8-GPU worker per node of ``nodes``, on those nodes only."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    template = {"spec": {"affinity": affinity, "containers": [{"name": "trainer", "image": "pytorch"}]}}
    return training_job(
        name,
        NS,
        workers=len(nodes),
        gpusPerWorker=8,
        template=template,
        priorityClassName=LOW,
        gpu={"sameModel": False},
        failurePolicy={"gracePeriodSeconds": 1},
    )


def _exclusive_jobset(cluster: Cluster, name: str, replicas: int) -> None:
    """A high-priority JobSet of ``replicas`` one-pod 8-GPU Jobs, each exclusive in a domain of ``POOL``, and its
    Jobs as the JobSet controller makes them: its labels and the exclusive annotation on each Job's pod template,
    with the pod affinities JobSet's pod webhook gives a Job's leader (to its own Job on the topology key, against
    every other Job there; kubernetes-sigs/jobset ``pkg/webhooks/pod_mutating_webhook.go``)."""
    spec = {"parallelism": 1, "completions": 1, "template": _template(8)}
    jobset = cluster.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "annotations": {EXCLUSIVE: POOL}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": spec}}]},
        }
    )
    uid = jobset["metadata"]["uid"]
    for index in range(replicas):
        job = f"{name}-workers-{index}"
        key = hashlib.sha1(f"{NS}/{job}".encode()).hexdigest()
        labels = {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
            "jobset.sigs.k8s.io/job-index": str(index),
            "jobset.sigs.k8s.io/job-global-index": str(index),
            "jobset.sigs.k8s.io/job-key": key,
            "jobset.sigs.k8s.io/jobset-uid": uid,
        }
        template = _template(8, {EXCLUSIVE: POOL})
        template["metadata"]["labels"] = labels
        own = {"key": "jobset.sigs.k8s.io/job-key", "operator": "In", "values": [key]}
        others = [
            {"key": "jobset.sigs.k8s.io/job-key", "operator": "Exists"},
            {"key": "jobset.sigs.k8s.io/job-key", "operator": "NotIn", "values": [key]},
        ]
        template["spec"]["priorityClassName"] = HIGH
        template["spec"]["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [own]}, "topologyKey": POOL, "namespaceSelector": {}}
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": others}, "topologyKey": POOL, "namespaceSelector": {}}
                ]
            },
        }
        manifest = indexed_job(job, 1, 8, template=template)
        manifest["metadata"]["labels"] = labels
        manifest["metadata"]["annotations"] = {EXCLUSIVE: POOL}
        manifest["metadata"]["ownerReferences"] = [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name, "uid": uid, "controller": True}
        ]
        cluster.create(manifest)


def _gpus(placement: dict[str, Any]) -> set[tuple[str, int]]:
    return {(w["node"], g) for w in placement["workers"] for g in w["gpus"]}


def test_a_jobset_of_exclusive_parts_preempts_one_pool_per_part(
    sandbox: SandboxHandle, cluster: Cluster, jobs: Jobs
) -> None:
    """Pools a and b of two 8-GPU nodes each, full of low-priority TrainingJobs: one on both nodes of pool a, one on
    each node of pool b. A high-priority JobSet of two exclusive one-pod Jobs preempts: pool a's job ends whole (both
    its pods), one of pool b's ends and the other runs on, and each Job lands in a pool of its own, on GPUs no other
    gang holds."""
    nodes = sandbox.free_gpu_nodes(4)
    pools = {nodes[0]: "a", nodes[1]: "a", nodes[2]: "b", nodes[3]: "b"}
    with priority_classes(sandbox.kubectl, {LOW: 100, HIGH: 1000}):
        for node, pool in pools.items():
            sandbox.kubectl("label", "node", node, f"{POOL}={pool}", "--overwrite")
        try:
            _preempt_one_pool_per_part(cluster, jobs, nodes, pools)
        finally:
            jobs.delete_all()  # before their class goes
            for node in pools:
                sandbox.kubectl("label", "node", node, f"{POOL}-", check=False)


def _preempt_one_pool_per_part(cluster: Cluster, jobs: Jobs, nodes: list[str], pools: dict[str, str]) -> None:
    jobs.apply(_low_job("low-a", nodes[:2]))
    jobs.apply(_low_job("low-b0", [nodes[2]]))
    jobs.apply(_low_job("low-b1", [nodes[3]]))
    before: dict[str, set[str]] = {}
    for name, count in (("low-a", 2), ("low-b0", 1), ("low-b1", 1)):
        jobs.wait_phase(name, "Running", timeout=90)
        before[name] = {p["metadata"]["uid"] for p in jobs.wait_running_pods(name, count, timeout=90)}
    _exclusive_jobset(cluster, "excl", 2)

    def nominated() -> dict[str, Any] | None:
        status = cluster.gang("jobset-excl").get("status") or {}
        return status.get("nomination") or (status if status.get("ranks") else None)

    seen = cluster.wait("the JobSet's nomination or plan", nominated, timeout=90)
    if "victims" in seen:  # the nomination, caught before the gang was placed
        assert sorted(seen["victims"]) in ([f"{NS}/low-a", f"{NS}/low-b0"], [f"{NS}/low-a", f"{NS}/low-b1"])
        assert {pools[e["node"]] for e in seen["gpus"]} == {"a", "b"}
        assert sum(len(e["gpus"]) for e in seen["gpus"]) == 16
    gang = cluster.wait_placed("jobset-excl", timeout=120)
    ranks = gang["status"]["ranks"]
    assert sorted(pools[r["node"]] for r in ranks) == ["a", "b"]  # each part in a pool of its own
    _planned_and_bound(cluster, gang, "jobset.sigs.k8s.io/jobset-name=excl")

    preempted = {name: (jobs.status(name).get("preemption") or {}).get("preemptedBy") for name in before}
    assert preempted["low-a"] == [f"{NS}/jobset/excl"]
    ended_b = [n for n in ("low-b0", "low-b1") if preempted[n]]
    assert len(ended_b) == 1, preempted  # one node of pool b is room enough
    survivor = "low-b1" if ended_b == ["low-b0"] else "low-b0"
    # Every victim ended whole: none of its pods is left; the survivor's pod runs on, untouched.
    for victim in ("low-a", *ended_b):
        left = {p["metadata"]["uid"] for p in jobs.pods(victim) if not p["metadata"].get("deletionTimestamp")}
        assert not left & before[victim], victim
    kept = jobs.status(survivor)
    assert kept["phase"] == "Running" and {p["metadata"]["uid"] for p in jobs.pods(survivor)} == before[survivor]
    # No GPU planned twice: the parts' GPUs are apart, and apart from the survivor's.
    planned = [(r["node"], g) for r in ranks for g in r["gpus"]]
    assert len(planned) == len(set(planned)) == 16
    assert not set(planned) & _gpus(kept["placement"])
