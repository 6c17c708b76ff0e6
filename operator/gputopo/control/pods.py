"""Builders of a placed gang's objects: the headless Service and one pod per rank, pinned to its node.

Pure: a job, a placement and a rank in, a manifest out. Names are deterministic (``<job>-<rank>``), so
creating them again after a restart finds the same objects instead of making duplicates.
"""

from __future__ import annotations

import copy
from typing import Any

from gputopo.api.gpus import names_gpus
from gputopo.api.group import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT_GENERATION,
    API_VERSION,
    GPU_RESOURCE,
    LABEL_JOB,
    LABEL_RANK,
)
from gputopo.api.trainingjob import PlacementStatus, TrainingJobSpec, WorkerPlacement
from gputopo.control.dra import use_claim
from gputopo.control.facts import format_gpus

__all__ = [
    "DEFAULT_MASTER_PORT",
    "is_gang",
    "owner_reference",
    "pod_manifest",
    "pod_name",
    "service_manifest",
    "torchrun_env",
]

DEFAULT_MASTER_PORT = 29500


def pod_name(job: str, rank: int) -> str:
    return f"{job}-{rank}"


def owner_reference(job: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingJob",
        "name": job,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _master_port(spec: TrainingJobSpec) -> int:
    """The port rank 0's first container names ``master`` or ``c10d``, else torchrun's default."""
    containers = (spec.template.get("spec") or {}).get("containers") or []
    for port in (containers[0].get("ports") or []) if containers else []:
        if isinstance(port, dict) and port.get("name") in ("master", "c10d") and port.get("containerPort"):
            return int(port["containerPort"])
    return DEFAULT_MASTER_PORT


def is_gang(spec: TrainingJobSpec) -> bool:
    """Whether the job has more than one worker. A one-worker job needs no Service and no subdomain (rank 0 is
    the pod itself)."""
    return spec.workers > 1


def torchrun_env(job: str, namespace: str, spec: TrainingJobSpec, worker: WorkerPlacement) -> list[dict[str, str]]:
    """torch.distributed's variables, torchrun's PET_* twins, and NCCL_IB_HCA from the rank's NICs. Rank 0 is
    reached through the gang's headless Service, or on localhost in a one-worker job."""
    master = f"{pod_name(job, 0)}.{job}.{namespace}.svc" if is_gang(spec) else "localhost"
    port = str(_master_port(spec))
    nproc = str(spec.gpus_per_worker)
    values = {
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(spec.workers * spec.gpus_per_worker),
        "RANK": str(worker.rank * spec.gpus_per_worker),
        "NODE_RANK": str(worker.rank),
        "LOCAL_WORLD_SIZE": nproc,
        "NPROC_PER_NODE": nproc,
        "PET_NNODES": str(spec.workers),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(worker.rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": port,
    }
    if worker.nics:
        values["NCCL_IB_HCA"] = "=" + ",".join(worker.nics)
    return [{"name": k, "value": v} for k, v in values.items()]


def _with_node_affinity(pod_spec: dict[str, Any], node: str) -> None:
    """AND a ``metadata.name In [node]`` requirement into every required node-selector term."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = pod_spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms


def _gpu_container(containers: list[dict[str, Any]]) -> dict[str, Any]:
    for container in containers:
        if names_gpus(container):
            return container
    return containers[0]


def pod_manifest(
    job: str,
    namespace: str,
    uid: str,
    spec: TrainingJobSpec,
    placement: PlacementStatus,
    worker: WorkerPlacement,
    claim: str | None = None,
) -> dict[str, Any]:
    """With ``claim`` (DRA mode) the GPUs come from that ResourceClaim, else from an nvidia.com/gpu limit.

    The pod is schedulable as it is created, pinned to its node: the plan holds the gang's GPUs from the moment
    it is made, so a rank bound before the rest of the gang exists takes nothing another plan could have had."""
    template = copy.deepcopy(spec.template)
    meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template["spec"]
    name = pod_name(job, worker.rank)

    labels = {**(meta.get("labels") or {}), LABEL_JOB: job, LABEL_RANK: str(worker.rank)}
    annotations = {
        **(meta.get("annotations") or {}),
        ANNOTATION_GPUS: format_gpus(worker.gpus),
        ANNOTATION_PLACEMENT_GENERATION: str(placement.generation),
    }

    if is_gang(spec):
        pod_spec["subdomain"] = job
    pod_spec.setdefault("restartPolicy", "Never")
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name  # the API server gives the pods its value
    pod_spec["hostname"] = name
    _with_node_affinity(pod_spec, worker.node)

    containers: list[dict[str, Any]] = pod_spec["containers"]
    gpu = _gpu_container(containers)
    if claim is not None:
        use_claim(pod_spec, claim, gpu)
    else:
        resources = gpu.setdefault("resources", {})
        count = str(spec.gpus_per_worker)
        resources.setdefault("limits", {})[GPU_RESOURCE] = count
        if GPU_RESOURCE in (resources.get("requests") or {}):
            resources["requests"][GPU_RESOURCE] = count
    env = torchrun_env(job, namespace, spec, worker)
    ours = {e["name"] for e in env}
    for container in containers:
        kept = [e for e in container.get("env") or [] if isinstance(e, dict) and e.get("name") not in ours]
        container["env"] = kept + env

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": pod_spec,
    }


def service_manifest(job: str, namespace: str, uid: str, spec: TrainingJobSpec) -> dict[str, Any]:
    """Headless, publishing not-ready addresses so rank 0 resolves before it reports Ready."""
    port = _master_port(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job,
            "namespace": namespace,
            "labels": {LABEL_JOB: job},
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB: job},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "master", "port": port, "targetPort": port}],
        },
    }
