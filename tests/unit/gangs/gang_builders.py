"""Pods and owner objects built as their controllers build them: the labels, annotations, owner references and
names (random suffixes included) of the JobSet, LeaderWorkerSet, training-operator and Job controllers."""

from __future__ import annotations

import hashlib
import random
import string
from typing import Any

from gputopo.gangs.model import GATE

Body = dict[str, Any]
_rng = random.Random(7)


def suffix(n: int = 5) -> str:
    """A random suffix like the ones generateName gives (lowercase letters and digits, no vowels)."""
    return "".join(_rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


def uid() -> str:
    return "-".join("".join(_rng.choice(string.hexdigits.lower()) for _ in range(k)) for k in (8, 4, 4, 4, 12))


def template(gpus: int, **annotations: str) -> Body:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1", "resources": resources}]},
    }


class PodBuilder:
    def __init__(self, name: str, namespace: str = "team-a") -> None:
        self.body: Body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid(),
                "labels": {},
                "annotations": {},
                "ownerReferences": [],
                "creationTimestamp": "2026-12-04T10:00:00Z",
            },
            "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}], "schedulingGates": [{"name": GATE}]},
            "status": {"phase": "Pending"},
        }

    @property
    def meta(self) -> Body:
        return self.body["metadata"]  # type: ignore[no-any-return]

    def label(self, key: str, value: str) -> PodBuilder:
        self.meta["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self.meta["annotations"][key] = value
        return self

    def gpus(self, count: object) -> PodBuilder:
        self.body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": count}}
        return self

    def gates(self, *names: str) -> PodBuilder:
        self.body["spec"]["schedulingGates"] = [{"name": n} for n in names]
        return self

    def owner(self, kind: str, name: str, api: str, owner_uid: str = "", controller: bool = True) -> PodBuilder:
        ref = {"apiVersion": api, "kind": kind, "name": name, "uid": owner_uid or uid()}
        if controller:
            ref |= {"controller": True, "blockOwnerDeletion": True}
        self.meta["ownerReferences"].append(ref)
        return self

    def created(self, stamp: str) -> PodBuilder:
        self.meta["creationTimestamp"] = stamp
        return self

    def priority(self, value: int) -> PodBuilder:
        self.body["spec"]["priority"] = value
        return self

    def env(self, name: str, value: str) -> PodBuilder:
        self.body["spec"]["containers"][0].setdefault("env", []).append({"name": name, "value": value})
        return self

    def group(self, podgroup: str) -> PodBuilder:
        self.body["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
        return self

    def spec(self, key: str, value: object) -> PodBuilder:
        self.body["spec"][key] = value
        return self

    def build(self) -> Body:
        return self.body


def pod(name: str, namespace: str = "team-a") -> PodBuilder:
    return PodBuilder(name, namespace)


# -- batch/v1 Jobs ---------------------------------------------------------------------------------------------


def job(name: str, parallelism: int, gpus: int, completions: int | None = None, namespace: str = "team-a") -> Body:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": uid()},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": parallelism,
            "completions": parallelism if completions is None else completions,
            "template": template(gpus),
        },
    }


def job_pod(job_body: Body, index: int, gpus: int) -> PodBuilder:
    """A pod as the Job controller creates an Indexed Job's: generateName ``<job>-<index>-``."""
    meta = job_body["metadata"]
    name, job_uid = meta["name"], meta["uid"]
    built = (
        pod(f"{name}-{index}-{suffix()}", meta["namespace"])
        .gpus(gpus)
        .label("batch.kubernetes.io/controller-uid", job_uid)
        .label("batch.kubernetes.io/job-name", name)
        .label("controller-uid", job_uid)
        .label("job-name", name)
        .label("batch.kubernetes.io/job-completion-index", str(index))
        .annotate("batch.kubernetes.io/job-completion-index", str(index))
        .owner("Job", name, "batch/v1", job_uid)
    )
    built.spec("hostname", f"{name}-{index}")
    return built


# -- JobSet ----------------------------------------------------------------------------------------------------


def jobset(
    name: str, *rjobs: tuple[str, int, int, int], exclusive: str | None = None, namespace: str = "team-a"
) -> Body:
    """A JobSet; each replicated job is (name, replicas, parallelism, GPUs per pod)."""
    annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid(), "annotations": annotations},
        "spec": {
            "replicatedJobs": [
                {
                    "name": rname,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                            "template": template(gpus),
                        }
                    },
                }
                for rname, replicas, parallelism, gpus in rjobs
            ]
        },
    }


def jobset_pods(js: Body) -> list[Body]:
    """Every pod of the JobSet, labelled as ``labelAndAnnotateObject`` and the Job controller label them."""
    meta = js["metadata"]
    name, ns = meta["name"], meta["namespace"]
    rjobs = js["spec"]["replicatedJobs"]
    total = sum(r["replicas"] for r in rjobs)
    exclusive = meta["annotations"].get("alpha.jobset.sigs.k8s.io/exclusive-topology")
    pods: list[Body] = []
    global_index = 0
    for rjob in rjobs:
        spec = rjob["template"]["spec"]
        gpus = spec["template"]["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
        for job_index in range(rjob["replicas"]):
            job_name = f"{name}-{rjob['name']}-{job_index}"
            key = hashlib.sha256(f"{ns}/{job_name}".encode()).hexdigest()[:40]
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/jobset-uid": meta["uid"],
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob["replicas"]),
                "jobset.sigs.k8s.io/global-replicas": str(total),
                "jobset.sigs.k8s.io/job-index": str(job_index),
                "jobset.sigs.k8s.io/job-key": key,
                "jobset.sigs.k8s.io/job-global-index": str(global_index),
                "jobset.sigs.k8s.io/group-name": "default",
                "jobset.sigs.k8s.io/group-replicas": str(total),
                "jobset.sigs.k8s.io/job-group-index": str(global_index),
            }
            job_body = {"metadata": {"name": job_name, "namespace": ns, "uid": uid()}}
            for index in range(spec["parallelism"]):
                built = job_pod(job_body, index, gpus)
                for k, v in labels.items():
                    built.label(k, v).annotate(k, v)
                if exclusive:
                    built.annotate("alpha.jobset.sigs.k8s.io/exclusive-topology", exclusive)
                pods.append(built.build())
            global_index += 1
    return pods


# -- LeaderWorkerSet -------------------------------------------------------------------------------------------


def lws(name: str, size: int, leader_gpus: int | None, worker_gpus: int, namespace: str = "team-a") -> Body:
    lwt: Body = {"size": size, "workerTemplate": template(worker_gpus)}
    if leader_gpus is not None:
        lwt["leaderTemplate"] = template(leader_gpus)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid()},
        "spec": {"replicas": 2, "leaderWorkerTemplate": lwt},
    }


def lws_pod(body: Body, group: int, worker: int, gpus: int) -> PodBuilder:
    """A leader (``<lws>-<group>``, from StatefulSet ``<lws>``) or a worker (``<lws>-<group>-<worker>``, from
    StatefulSet ``<lws>-<group>``), labelled by LWS's pod webhook."""
    meta = body["metadata"]
    name, size = meta["name"], body["spec"]["leaderWorkerTemplate"]["size"]
    pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    sts = name if worker == 0 else f"{name}-{group}"
    built = (
        pod(pod_name, meta["namespace"])
        .gpus(gpus)
        .label("leaderworkerset.sigs.k8s.io/name", name)
        .label("leaderworkerset.sigs.k8s.io/group-index", str(group))
        .label("leaderworkerset.sigs.k8s.io/worker-index", str(worker))
        .label("leaderworkerset.sigs.k8s.io/group-key", hashlib.sha1(f"{name}{group}".encode()).hexdigest())
        .label("leaderworkerset.sigs.k8s.io/template-revision-hash", "5d8f7b9c4")
        .label("apps.kubernetes.io/pod-index", str(worker if worker else group))
        .annotate("leaderworkerset.sigs.k8s.io/size", str(size))
        .owner("StatefulSet", sts, "apps/v1")
    )
    if worker:
        built.annotate("leaderworkerset.sigs.k8s.io/leader-name", f"{name}-{group}")
    return built


# -- Kubeflow PyTorchJob ---------------------------------------------------------------------------------------


def pytorchjob(name: str, masters: int, workers: int, master_gpus: int, worker_gpus: int) -> Body:
    specs: Body = {}
    if masters:
        specs["Master"] = {"replicas": masters, "template": template(master_gpus)}
    specs["Worker"] = {"replicas": workers, "template": template(worker_gpus)}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": uid()},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def pytorch_pod(body: Body, rtype: str, index: int, gpus: int) -> PodBuilder:
    """A pod as ``createNewPod`` makes it (name ``<job>-<type>-<index>``) with the env ``setPodEnv`` gives it."""
    meta = body["metadata"]
    name = meta["name"]
    specs = body["spec"]["pytorchReplicaSpecs"]
    total = sum(s["replicas"] for s in specs.values())
    built = (
        pod(f"{name}-{rtype}-{index}")
        .gpus(gpus)
        .label("training.kubeflow.org/operator-name", "pytorchjob-controller")
        .label("training.kubeflow.org/job-name", name)
        .label("training.kubeflow.org/replica-type", rtype)
        .label("training.kubeflow.org/replica-index", str(index))
        .owner("PyTorchJob", name, "kubeflow.org/v1", meta["uid"])
        .env("PET_NNODES", str(total))
    )
    if rtype == "master":
        built.label("training.kubeflow.org/job-role", "master")
    if "Master" in specs:
        rank = index + 1 if rtype == "worker" else index
        built.env("MASTER_PORT", "23456").env("WORLD_SIZE", str(total)).env("RANK", str(rank))
        built.env("PET_NODE_RANK", str(rank))
    return built
