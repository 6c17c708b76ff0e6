"""Kubeflow PyTorchJobs (kubeflow/training-operator v1.9.0): labels from ``pkg/apis/kubeflow.org/v1/common_types.go``,
set in ``pkg/controller.v1/common/pod.go`` (``createNewPod``): ``training.kubeflow.org/job-name``,
``replica-type`` (the type in lower case: ``master``, ``worker``), ``replica-index``, ``job-role: master`` on the
master, ``operator-name: pytorchjob-controller``. Pods are named ``<job>-<type>-<index>``.

One gang per PyTorchJob; its size is the sum of ``spec.pytorchReplicaSpecs[*].replicas`` (default 1). With a
Master the master is rank 0 and worker i is rank i+1, as the controller's env says (``pkg/controller.v1/pytorch/
envvar.go``: ``RANK`` and ``PET_NODE_RANK``); without one, worker i is rank i. When the PyTorchJob is not read,
the pod's own env gives the rank and ``PET_NNODES`` the size (a range "1:4" under an elastic policy: unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from gputopo.api.fields import shown
from gputopo.gangs.annotations import read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    bounded,
    controller_of,
    labels_of,
    mapping,
    namespace_of,
    own_gpus,
    owner_body,
    pod_priority,
    template_gpus,
    text,
)
from gputopo.gangs.model import Declared, GangId, OwnerRef

__all__ = [
    "JOB_NAME_LABEL",
    "JOB_ROLE_LABEL",
    "OPERATOR_NAME",
    "OPERATOR_NAME_LABEL",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "SOURCE",
    "claim",
    "pod_env",
]

SOURCE: Final = "pytorchjob"
API_VERSION: Final = "kubeflow.org/v1"
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
OPERATOR_NAME: Final = "pytorchjob-controller"
_ORDER: Final = ("master", "worker")


def pod_env(pod: Raw, name: str) -> str | None:
    """The value of env var ``name`` in the pod's first container that sets it plainly (not from a source)."""
    containers = mapping(pod.get("spec")).get("containers")
    for container in containers if isinstance(containers, list) else ():
        env = mapping(container).get("env")
        for entry in env if isinstance(env, list) else ():
            if isinstance(entry, Mapping) and entry.get("name") == name and isinstance(entry.get("value"), str):
                value: str = entry["value"]
                return value
    return None


def _specs(job: Raw) -> dict[str, Mapping[str, Any]]:
    """Replica specs by lower-case type (the API takes any case and the controller camel-cases it)."""
    specs = mapping(mapping(job.get("spec")).get("pytorchReplicaSpecs"))
    return {str(k).lower(): mapping(v) for k, v in specs.items()}


def claim(pod: Raw, owners: Owners) -> Claim | None:
    labels = labels_of(pod)
    name = labels.get(JOB_NAME_LABEL, "")
    owner_kind = text(controller_of(pod).get("kind"))
    # The training operator labels TFJob, MPIJob, ... pods the same way: only PyTorchJob's are read here.
    if not name or (owner_kind != "PyTorchJob" and labels.get(OPERATOR_NAME_LABEL) != OPERATOR_NAME):
        return None
    namespace = namespace_of(pod)
    pod_needs = read_needs(annotations_of(pod))
    problems = list(pod_needs.problems)
    rtype = labels.get(REPLICA_TYPE_LABEL, "").lower()
    index = as_int(labels.get(REPLICA_INDEX_LABEL))
    job = owner_body(owners.pytorchjobs, namespace, name)
    owner = OwnerRef(API_VERSION, "PyTorchJob", name, text(controller_of(pod).get("uid")))
    declared = None
    rank = None
    uniform = False
    if job is not None:
        owner = replace(owner, uid=text(mapping(job.get("metadata")).get("uid")) or owner.uid)
        specs = _specs(job)
        for unknown in sorted(set(specs) - set(_ORDER)):
            problems.append(f"PyTorchJob {namespace}/{name}: replica type {shown(unknown)} is not Master or Worker")
        shape: list[int] = []
        roles: list[str] = []
        for rt in _ORDER:
            if rt not in specs:
                continue
            replicas = as_int(specs[rt].get("replicas"))
            where = f"PyTorchJob {namespace}/{name}: {rt}.replicas"
            replicas = bounded(1 if replicas is None else replicas, where, problems) or 0
            gpus = template_gpus(
                specs[rt].get("template"), f"PyTorchJob {namespace}/{name}: {rt}", problems, owners, namespace
            )
            shape += [gpus] * replicas
            roles += [rt] * replicas
        total = bounded(len(shape), f"PyTorchJob {namespace}/{name}", problems)
        declared = Declared(len(shape), tuple(shape), tuple(roles)) if shape and total else None
        if index is not None and rtype in _ORDER:
            rank = index + 1 if rtype == "worker" and "master" in specs else index
    else:
        rank = as_int(pod_env(pod, "RANK") or pod_env(pod, "PET_NODE_RANK") or "")
        if rank is None and index is not None and rtype in _ORDER:
            rank = index  # no RANK env: the controller sets it only when there is a Master
        size = bounded(as_int(pod_env(pod, "PET_NNODES") or ""), f"pod of PyTorchJob {name}: PET_NNODES", problems)
        if size:
            declared = Declared(size, (own_gpus(pod, problems, owners),) * size)
            uniform = True
    if rank is None:
        problems.append(f"pod of PyTorchJob {name}: replica type {shown(rtype)}, index {index} do not name a rank")
    return Claim(
        GangId(namespace, SOURCE, name),
        rank,
        role=rtype,
        declared=declared,
        needs=pod_needs.needs,
        priority=pod_priority(pod),
        owner=owner,
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
        uniform=uniform,
    )
