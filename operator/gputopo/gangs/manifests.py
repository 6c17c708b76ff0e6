"""The pods an owner's controller would create from its manifest, labelled as the gang sources read them.

``gputopo plan`` takes a Job, JobSet, LeaderWorkerSet, PyTorchJob or PodGroup manifest (or bare Pods that name their
gang) before anything runs: the pods built here (each held by gputopo's gate, as the admission policy would hold
it) and the owner objects the operator would watch beside them (the PodGroups in the file, the Job controller's
PodGroup for a Job with ``spec.scheduling``, a JobSet's child Jobs) go through ``read_gangs`` as the controller's
would. Names, labels and annotations follow each controller, with the random suffixes left out;
``tests/unit/gangs/gang_builders.py`` builds the same pods with them.

Pure: manifests in, pods out. A manifest whose size cannot be read is a ``ManifestError`` naming the field.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.api.group import LABEL_RANK
from gputopo.errors import GputopoError
from gputopo.gangs.claims import COMPLETION_INDEX, Owners, Raw, annotations_of, as_int, mapping, text
from gputopo.gangs.model import GATE
from gputopo.gangs.sources import jobset as js
from gputopo.gangs.sources import leaderworkerset as lws
from gputopo.gangs.sources import pytorchjob as ptj

__all__ = ["KINDS", "ManifestError", "Pods", "job_podgroup", "kind_of", "pods_of"]

Body = dict[str, Any]

# The owners ``pods_of`` builds pods for: kind → apiVersion.
KINDS: Final = {
    "Job": "batch/v1",
    "JobSet": js.API_VERSION,
    "LeaderWorkerSet": lws.API_VERSION,
    "PyTorchJob": ptj.API_VERSION,
    "PodGroup": "scheduling.k8s.io/v1beta1",
    "Pod": "v1",
}
_WORKLOADS: Final = ("Job", "JobSet", "LeaderWorkerSet", "PyTorchJob")
_JOB_NAME_LABELS: Final = ("batch.kubernetes.io/job-name", "job-name")
_JOB_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")


class ManifestError(GputopoError):
    """A manifest gputopo cannot build a gang's pods from; the message names the field."""


@dataclass(frozen=True, slots=True)
class Pods:
    """The pods of one gang, and the owner objects ``read_gangs`` reads them with."""

    pods: tuple[Body, ...]
    owners: Owners


def kind_of(document: object) -> str:
    """The document's ``kind``; '' when it has none."""
    return text(mapping(document).get("kind"))


def pods_of(documents: Sequence[Raw]) -> Pods:
    """The pods the first workload among ``documents`` (a Job, JobSet, LeaderWorkerSet or PyTorchJob) would get,
    read with every PodGroup beside it (one its pods name); without a workload, a PodGroup's, its pod taken from a
    Pod among them; without either, the Pods themselves (each naming its gang by gputopo's labels or a Kueue pod
    group's). A document without a namespace is in the owner's, as ``kubectl apply -f`` puts it."""
    owner = next((d for d in documents if kind_of(d) in _WORKLOADS), None)
    owner = owner or next((d for d in documents if kind_of(d) == "PodGroup"), None)
    if owner is None:
        bare = [_owner(d, "") for d in documents if kind_of(d) == "Pod"]
        if not bare:
            raise ManifestError(f"kind: none of {', '.join(KINDS)}")
        return Pods(tuple(_pod(d, d, d["metadata"]["name"], None) for d in bare), Owners())
    body = _owner(owner, "")
    kind, meta = kind_of(body), body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    key = (namespace, name)
    groups = {
        (group["metadata"]["namespace"], group["metadata"]["name"]): group
        for group in (_owner(d, namespace) for d in documents if kind_of(d) == "PodGroup" and d is not owner)
    }
    if kind == "Job":
        built = _job(body)
        return Pods(built.pods, replace(built.owners, podgroups={**groups, **built.owners.podgroups}))
    if kind == "JobSet":
        pods, jobs = _jobset(body)
        return Pods(tuple(pods), Owners(podgroups=groups, jobs=jobs, jobsets={key: body}))
    if kind == "LeaderWorkerSet":
        return Pods(tuple(_lws(body)), Owners(podgroups=groups, leaderworkersets={key: body}))
    if kind == "PyTorchJob":
        return Pods(tuple(_pytorchjob(body)), Owners(podgroups=groups, pytorchjobs={key: body}))
    pod = next((d for d in documents if kind_of(d) == "Pod"), None)
    if pod is None:
        raise ManifestError(f"PodGroup {name}: no Pod to use as the gang's pod template (add one as a second document)")
    return Pods(tuple(_podgroup(body, pod)), Owners(podgroups={**groups, key: body}))


def _owner(document: Raw, namespace: str) -> Body:
    """A copy of an owner document as the API server would hold it: its apiVersion checked, a name, a namespace
    (``namespace``, else "default", when it names none) and a uid."""
    kind = kind_of(document)
    if text(document.get("apiVersion")) != KINDS[kind]:
        raise ManifestError(f'apiVersion: "{text(document.get("apiVersion"))}", a {kind} is {KINDS[kind]}')
    meta = mapping(document.get("metadata"))
    name = text(meta.get("name"))
    if not name:
        raise ManifestError(f"metadata.name: a {kind} needs a name")
    body: Body = copy.deepcopy(dict(document))
    namespace = text(meta.get("namespace")) or namespace or "default"
    body["metadata"] = {**meta, "namespace": namespace, "uid": text(meta.get("uid")) or f"{name}-uid"}
    return body


def _count(value: object, field: str, default: int | None = None) -> int:
    found = default if value is None else as_int(value)
    if not found:
        shown = "missing" if value is None else f"{value!r} is not a whole number ≥ 1"
        raise ManifestError(f"{field}: {shown}")
    if found > MAX_GANG_SIZE:
        raise ManifestError(f"{field}: {found} is more pods than a gang may hold ({MAX_GANG_SIZE})")
    return found


def _pod(template: object, owner: Body, name: str, ref: Body | None) -> Body:
    """A gated pod from a pod template, in the owner's namespace, controlled by ``ref``."""
    tmpl = mapping(template)
    meta = mapping(tmpl.get("metadata"))
    spec: Body = copy.deepcopy(dict(mapping(tmpl.get("spec"))))
    raw_gates = spec.get("schedulingGates")
    gates = [g for g in raw_gates if mapping(g).get("name") != GATE] if isinstance(raw_gates, list) else []
    spec["schedulingGates"] = [*gates, {"name": GATE}]
    owner_meta = mapping(owner.get("metadata"))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner_meta["namespace"],
            "uid": f"{name}-uid",
            "labels": dict(mapping(meta.get("labels"))),
            "annotations": dict(mapping(meta.get("annotations"))),
            "ownerReferences": [ref] if ref else [],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _controller(owner: Body) -> Body:
    meta = mapping(owner.get("metadata"))
    return {
        "apiVersion": text(owner.get("apiVersion")),
        "kind": text(owner.get("kind")),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _job_pods(job: Body, template: object, size: int, indexed: bool = True) -> list[Body]:
    """A Job's pods, as the Job controller makes them (names ``<job>-<index>``, without the random tail); those of
    a NonIndexed Job carry no completion index."""
    meta = mapping(job.get("metadata"))
    name, uid = meta["name"], meta["uid"]
    pods = []
    for index in range(size):
        pod = _pod(template, job, f"{name}-{index}", _controller(job))
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        labels.update(dict.fromkeys(_JOB_NAME_LABELS, name) | dict.fromkeys(_JOB_UID_LABELS, uid))
        if indexed:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
            pod["spec"].setdefault("hostname", f"{name}-{index}")
        pods.append(pod)
    return pods


def _job(job: Body) -> Pods:
    meta = mapping(job.get("metadata"))
    spec = mapping(job.get("spec"))
    indexed = text(spec.get("completionMode")) == "Indexed"
    scheduling = spec.get("scheduling")
    if not indexed and scheduling is None:
        raise ManifestError(
            f'spec.completionMode: "{text(spec.get("completionMode"))}"; a gang is an Indexed Job or a Job with '
            "spec.scheduling"
        )
    parallelism = _count(spec.get("parallelism"), "spec.parallelism", default=1)
    size = js.pods_per_job(spec)
    if not size:
        raise ManifestError("spec.completions: 0, the Job runs no pod")
    pods = _job_pods(job, spec.get("template"), size, indexed)
    key = (meta["namespace"], meta["name"])
    if scheduling is None:
        return Pods(tuple(pods), Owners(jobs={key: job}))
    group = job_podgroup(job, mapping(scheduling), parallelism)
    name = group["metadata"]["name"]
    for pod in pods:
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
    return Pods(tuple(pods), Owners(podgroups={(meta["namespace"], name): group}, jobs={key: job}))


def job_podgroup(job: Body, scheduling: Raw, parallelism: int) -> Body:
    """The PodGroup the Job controller makes for a Job with ``spec.scheduling`` (k8s.io/kubernetes v1.37.2
    ``pkg/controller/job/job_scheduling_manager.go`` and ``pkg/api/job/util.go``): named ``<job>-pgt-0`` here
    (the controller adds its Workload's name and a hash), controlled by the Job, with the Job's scheduling
    policy (``basic`` when it names none), a gang's unset ``minCount`` the Job's ``parallelism`` (at least 1),
    and its scheduling constraints and disruption mode."""
    meta = mapping(job.get("metadata"))
    policy: Body = copy.deepcopy(dict(mapping(scheduling.get("schedulingPolicy")))) or {"basic": {}}
    if "gang" in policy:
        gang = dict(mapping(policy["gang"]))
        if gang.get("minCount") is None:
            gang["minCount"] = max(1, parallelism)
        policy["gang"] = gang
    spec: Body = {"schedulingPolicy": policy}
    for field in ("schedulingConstraints", "disruptionMode"):
        if field in scheduling:
            spec[field] = copy.deepcopy(scheduling[field])
    return {
        "apiVersion": KINDS["PodGroup"],
        "kind": "PodGroup",
        "metadata": {
            "name": f"{meta['name']}-pgt-0",
            "namespace": meta["namespace"],
            "ownerReferences": [_controller(job)],
        },
        "spec": spec,
    }


def _jobset(jobset: Body) -> tuple[list[Body], dict[tuple[str, str], Body]]:
    """The JobSet's pods, and its child Jobs as the JobSet controller makes them (the operator reads those too)."""
    meta = mapping(jobset.get("metadata"))
    name = meta["name"]
    rjobs = mapping(jobset.get("spec")).get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise ManifestError("spec.replicatedJobs: a JobSet needs at least one replicated job")
    whole = annotations_of(jobset).get(js.EXCLUSIVE_KEY)
    total = 0
    for i, raw in enumerate(rjobs):
        total += _count(mapping(raw).get("replicas"), f"spec.replicatedJobs[{i}].replicas", default=1)
    pods: list[Body] = []
    jobs: dict[tuple[str, str], Body] = {}
    global_index = 0
    for i, raw in enumerate(rjobs):
        rjob = mapping(raw)
        rjob_name = text(rjob.get("name"))
        if not rjob_name:
            raise ManifestError(f"spec.replicatedJobs[{i}].name: missing")
        template = mapping(rjob.get("template"))
        job_spec = mapping(template.get("spec"))
        exclusive = annotations_of(template).get(js.EXCLUSIVE_KEY) or whole
        replicas = _count(rjob.get("replicas"), f"spec.replicatedJobs[{i}].replicas", default=1)
        if len(pods) + replicas * max(0, js.pods_per_job(job_spec)) > MAX_GANG_SIZE:
            raise ManifestError(
                f"spec.replicatedJobs[{i}]: {len(pods) + replicas * js.pods_per_job(job_spec)} pods in all, more than "
                f"a gang may hold ({MAX_GANG_SIZE})"
            )
        for job_index in range(replicas):
            labels = {
                js.JOBSET_NAME_KEY: name,
                js.JOBSET_UID_KEY: meta["uid"],
                js.REPLICATED_JOB_NAME_KEY: rjob_name,
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
                "jobset.sigs.k8s.io/global-replicas": str(total),
                js.JOB_INDEX_KEY: str(job_index),
                js.JOB_GLOBAL_INDEX_KEY: str(global_index),
            }
            child = js.job_name(name, rjob_name, job_index)
            job: Body = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": child,
                    "namespace": meta["namespace"],
                    "uid": f"{child}-uid",
                    "labels": dict(labels),
                    "ownerReferences": [_controller(jobset)],
                },
                "spec": copy.deepcopy(dict(job_spec)),
            }
            jobs[(meta["namespace"], child)] = job
            indexed = text(job_spec.get("completionMode")) in ("Indexed", "")  # JobSet's webhook defaults Indexed
            for pod in _job_pods(job, job_spec.get("template"), js.pods_per_job(job_spec), indexed):
                pod["metadata"]["labels"].update(labels)
                pod["metadata"]["annotations"].update(labels)
                if exclusive:
                    pod["metadata"]["annotations"][js.EXCLUSIVE_KEY] = exclusive
                pods.append(pod)
            global_index += 1
    return pods, jobs


def _lws(body: Body) -> list[Body]:
    """Group 0 of a LeaderWorkerSet: its leader ``<lws>-0`` and workers ``<lws>-0-<worker>`` (every group is alike)."""
    meta = mapping(body.get("metadata"))
    name = meta["name"]
    template = mapping(mapping(body.get("spec")).get("leaderWorkerTemplate"))
    size = _count(template.get("size"), "spec.leaderWorkerTemplate.size", default=1)
    if not isinstance(template.get("workerTemplate"), dict):
        raise ManifestError("spec.leaderWorkerTemplate.workerTemplate: missing")
    exclusive = annotations_of(body).get(lws.EXCLUSIVE_KEY)
    leader_template = template.get("leaderTemplate") or template["workerTemplate"]
    pods = []
    for worker in range(size):
        leader = worker == 0
        tmpl = leader_template if leader else template["workerTemplate"]
        sts = name if leader else f"{name}-0"
        ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": f"{sts}-uid", "controller": True}
        pod = _pod(tmpl, body, f"{name}-0" if leader else f"{name}-0-{worker}", ref)
        pod["metadata"]["labels"].update(
            {lws.NAME_LABEL: name, lws.GROUP_INDEX_LABEL: "0", lws.WORKER_INDEX_LABEL: str(worker)}
        )
        annotations = pod["metadata"]["annotations"]
        annotations[lws.SIZE_ANNOTATION] = str(size)
        if not leader:
            annotations["leaderworkerset.sigs.k8s.io/leader-name"] = f"{name}-0"
        if exclusive:
            annotations[lws.EXCLUSIVE_KEY] = exclusive
        pods.append(pod)
    return pods


def _pytorchjob(job: Body) -> list[Body]:
    meta = mapping(job.get("metadata"))
    name = meta["name"]
    specs = mapping(mapping(job.get("spec")).get("pytorchReplicaSpecs"))
    if not specs:
        raise ManifestError("spec.pytorchReplicaSpecs: a PyTorchJob needs a Master or Worker replica spec")
    pods = []
    for rtype, raw in specs.items():
        spec = mapping(raw)
        kind = str(rtype).lower()
        replicas = _count(spec.get("replicas"), f"spec.pytorchReplicaSpecs.{rtype}.replicas", default=1)
        for index in range(replicas):
            pod = _pod(spec.get("template"), job, f"{name}-{kind}-{index}", _controller(job))
            labels = pod["metadata"]["labels"]
            labels.update(
                {
                    ptj.OPERATOR_NAME_LABEL: ptj.OPERATOR_NAME,
                    ptj.JOB_NAME_LABEL: name,
                    ptj.REPLICA_TYPE_LABEL: kind,
                    ptj.REPLICA_INDEX_LABEL: str(index),
                }
            )
            if kind == "master":
                labels[ptj.JOB_ROLE_LABEL] = "master"
            pods.append(pod)
    return pods


def _podgroup(group: Body, pod: Raw) -> list[Body]:
    """``minCount`` copies of the pod, each naming the group, ranked by ``gputopo.io/rank``."""
    meta = mapping(group.get("metadata"))
    name = meta["name"]
    spec = mapping(group.get("spec"))
    policy = mapping(spec.get("schedulingPolicy"))
    if "gang" not in policy:
        raise ManifestError(f"PodGroup {name}: spec.schedulingPolicy: not gang (a basic group is no gang)")
    size = _count(mapping(policy.get("gang")).get("minCount"), "spec.schedulingPolicy.gang.minCount")
    base = text(mapping(pod.get("metadata")).get("name")) or name
    pods = []
    for rank in range(size):
        built = _pod(pod, group, f"{base}-{rank}", None)
        built["metadata"]["labels"][LABEL_RANK] = str(rank)
        built["spec"]["schedulingGroup"] = {"podGroupName": name}
        pods.append(built)
    return pods
