"""TrainingJobs under Kueue quota (pure): the Workload gputopo makes for a job, and what Kueue's answer says.

A TrainingJob labelled ``kueue.x-k8s.io/queue-name`` is an external framework's job in Kueue's terms: gputopo makes
its ``Workload`` (``kueue.x-k8s.io/v1beta2``), one per job generation under a name made from the job's uid and
generation, owned by the job (a controller owner reference, so the garbage collector deletes it with the job), and
places the job only while Kueue admits that Workload (``Admitted`` True). What Kueue asks of a framework is what its
own job reconciler (``pkg/controller/jobframework``) does, and gputopo does the same:

- ``Evicted`` True (preempted, deactivated, ...): stop the job, and once none of its pods is left, clear the
  admission: ``status.admission`` removed, ``QuotaReserved`` False with reason ``Pending`` and the eviction's
  message, ``Admitted`` False, ``Requeued`` True when Kueue evicted it to requeue it (reason ``Preempted`` or
  ``NodeFailures``). Kueue then queues the Workload again and admits it when quota frees; the admission resets
  ``Evicted`` to False.
- the job ended: ``Finished`` True (reason ``Succeeded`` or ``Failed``), which gives the quota back.

A job without the label runs without Kueue's quota, unless the operator manages jobs without a queue name
(``QueueNameRule``, Kueue's own ``manageJobsWithoutQueueName`` and ``managedJobsNamespaceSelector`` for TrainingJobs):
then a job of a managed namespace that names no LocalQueue waits, unplaced, until it names one, as Kueue keeps such a
Job suspended. A job already placed when the rule is turned on runs on.

The Workload carries no finalizer (Kueue's reconciler adds one only to the Workloads of the jobs it manages), so a
deleted job's Workload goes at once. Status writes are merge patches that carry the Workload's resourceVersion: a
Workload Kueue changed meanwhile is read again by the next pass instead of overwritten.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from gputopo.api.fields import whole_number
from gputopo.api.gpus import names_gpus
from gputopo.api.group import API_VERSION, GPU_RESOURCE
from gputopo.api.trainingjob import TrainingJobSpec
from gputopo.control.facts import QUEUE_LABEL, as_dict, as_list
from gputopo.control.pods import owner_reference

__all__ = [
    "KUEUE_API_VERSION",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "LABEL_JOB_GENERATION",
    "POD_SET",
    "QUEUE_LABEL",
    "WORKLOAD_PLURAL",
    "Admission",
    "KueueView",
    "QueueNameRule",
    "Reading",
    "WorkloadFacts",
    "finish_patch",
    "read",
    "release_patch",
    "workload_facts",
    "workload_manifest",
    "workload_name",
]

KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
WORKLOAD_PLURAL: Final = "workloads"
LABEL_JOB_GENERATION: Final = "gputopo.io/job-generation"  # on a Workload: the TrainingJob generation it is for
POD_SET: Final = "workers"
_MAX_NAME: Final = 253
_HASH: Final = 10
# Eviction reasons after which Kueue's own reconciler marks the Workload Requeued True (jobframework).
_REQUEUED_REASONS: Final = ("Preempted", "NodeFailures")


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """A Workload a TrainingJob owns, as a pass reads it."""

    namespace: str
    name: str
    owner_uid: str
    job_generation: int | None
    resource_version: str = ""
    quota_reserved: bool = False
    admitted: bool = False
    has_admission: bool = False  # status.admission is set (quota is held)
    cluster_queue: str = ""
    evicted: tuple[str, str] | None = None  # (reason, message) while Evicted is True
    finished: bool = False
    waiting: str = ""  # QuotaReserved's message while it is False: why Kueue has not admitted it
    deleting: bool = False
    conditions: tuple[Mapping[str, Any], ...] = field(default=(), compare=True)


@dataclass(frozen=True, slots=True)
class KueueView:
    """The Workloads TrainingJobs own, by the owner's uid. A pass without one (None) runs where Kueue's Workload
    API is not served."""

    workloads: Mapping[str, tuple[WorkloadFacts, ...]] = field(default_factory=dict)

    def of(self, uid: str) -> tuple[WorkloadFacts, ...]:
        return self.workloads.get(uid, ())


@dataclass(frozen=True, slots=True)
class QueueNameRule:
    """Whether a TrainingJob must name a Kueue LocalQueue to be placed: Kueue's ``manageJobsWithoutQueueName``, in the
    ``namespaces`` named (empty: every namespace; Kueue's ``managedJobsNamespaceSelector`` by namespace name)."""

    manage_jobs_without_queue_name: bool = False
    namespaces: frozenset[str] = frozenset()

    def refusal(self, namespace: str) -> str | None:
        """Why a job of ``namespace`` that names no LocalQueue is not placed; None when it may be placed so."""
        if not self.manage_jobs_without_queue_name or (self.namespaces and namespace not in self.namespaces):
            return None
        return (
            f"waiting for a label {QUEUE_LABEL}: TrainingJobs of namespace {namespace} run only under Kueue's quota "
            "(the operator's kueue.manageJobsWithoutQueueName)"
        )


def workload_facts(body: Mapping[str, Any]) -> WorkloadFacts | None:
    """The facts of a Workload whose controller is a TrainingJob; None for any other Workload. Never raises."""
    meta, status = as_dict(body.get("metadata")), as_dict(body.get("status"))
    owner = next(
        (
            str(ref.get("uid"))
            for ref in map(as_dict, as_list(meta.get("ownerReferences")))
            if ref.get("kind") == "TrainingJob" and ref.get("apiVersion") == API_VERSION and ref.get("controller")
        ),
        None,
    )
    if not owner:
        return None
    conditions = tuple(c for c in map(as_dict, as_list(status.get("conditions"))) if c.get("type"))
    by_type = {str(c["type"]): c for c in conditions}

    def true(type_: str) -> bool:
        return by_type.get(type_, {}).get("status") == "True"

    evicted = by_type.get("Evicted") if true("Evicted") else None
    reserved = by_type.get("QuotaReserved", {})
    admission = as_dict(status.get("admission"))
    generation = whole_number(as_dict(meta.get("labels")).get(LABEL_JOB_GENERATION))
    return WorkloadFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        owner_uid=owner,
        job_generation=generation,
        resource_version=str(meta.get("resourceVersion") or ""),
        quota_reserved=true("QuotaReserved"),
        admitted=true("Admitted"),
        has_admission=bool(admission),
        cluster_queue=str(admission.get("clusterQueue") or ""),
        evicted=(str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")) if evicted else None,
        finished=true("Finished"),
        waiting=str(reserved.get("message") or "") if reserved.get("status") == "False" else "",
        deleting=bool(meta.get("deletionTimestamp")),
        conditions=conditions,
    )


def workload_name(job: str, uid: str, generation: int, queue: str) -> str:
    """``trainingjob-<job>-<hash>``: the same for the same job generation and LocalQueue, whoever makes it (a
    restarted operator finds the name taken instead of making a second Workload), and new for a new generation,
    another queue (the label changed) or a new job of the same name. At most 253 characters, a DNS subdomain as
    the job's own name is."""
    digest = hashlib.sha256(f"{uid}\n{generation}\n{queue}".encode()).hexdigest()[:_HASH]
    prefix = f"trainingjob-{job}"[: _MAX_NAME - _HASH - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def _quota_container(container: Mapping[str, Any], gpus: int | None) -> dict[str, Any]:
    """A container as Kueue counts it: its name, image and requests (a limit without a request counts as one, as
    the API server defaults it); with ``gpus``, that many ``nvidia.com/gpu`` requested."""
    resources = as_dict(container.get("resources"))
    requests = {**as_dict(resources.get("limits")), **as_dict(resources.get("requests"))}
    if gpus is not None:
        requests[GPU_RESOURCE] = str(gpus)
    out: dict[str, Any] = {"name": str(container.get("name") or "worker")}
    if container.get("image"):
        out["image"] = container["image"]
    if requests:
        out["resources"] = {"requests": {str(k): str(v) for k, v in requests.items()}}
    return out


def _pod_set_template(spec: TrainingJobSpec) -> dict[str, Any]:
    """The worker template as Kueue needs it: what each worker requests, and where it may run (node selector,
    affinity, tolerations: a flavor's node labels and taints are matched against them). The GPUs are counted on
    the first container that names them (the one the pods get them on), else the first; in DRA mode too, so the
    ClusterQueue's ``nvidia.com/gpu`` quota covers the job whichever way its pods get their devices."""
    template = spec.template
    pod = as_dict(template.get("spec"))
    containers = [as_dict(c) for c in as_list(pod.get("containers"))]
    named = next((i for i, c in enumerate(containers) if names_gpus(c)), 0)
    gpus = spec.gpus_per_worker
    counted = [_quota_container(c, gpus if i == named else None) for i, c in enumerate(containers)]
    out: dict[str, Any] = {"containers": counted}
    init = [_quota_container(as_dict(c), None) for c in as_list(pod.get("initContainers"))]
    if init:
        out["initContainers"] = init
    for key in ("nodeSelector", "affinity", "tolerations", "priorityClassName"):
        if pod.get(key):
            out[key] = pod[key]
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    out.setdefault("restartPolicy", "Never")
    return {"spec": out}


def workload_manifest(
    namespace: str, job: str, uid: str, generation: int, spec: TrainingJobSpec, queue: str, priority: int
) -> dict[str, Any]:
    """The Workload of one job generation: one pod set of ``workers`` pods, each requesting what a worker does,
    for the LocalQueue ``queue``, at the job's ``priority`` (its PriorityClass's value, named by
    ``priorityClassRef`` when the job names one). Owned by the job as its controller."""
    workload: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": POD_SET, "count": spec.workers, "template": _pod_set_template(spec)}],
        "priority": priority,
    }
    if spec.priority_class_name:
        workload["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": spec.priority_class_name,
        }
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job, uid, generation, queue),
            "namespace": namespace,
            "labels": {LABEL_JOB_GENERATION: str(generation)},
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": workload,
    }


class Admission(StrEnum):
    """Where a job stands with Kueue."""

    MISSING = "Missing"  # its generation's Workload is not made yet
    WAITING = "Waiting"  # made, not admitted
    ADMITTED = "Admitted"
    EVICTED = "Evicted"  # Kueue took the admission back: stop the job, then clear it


@dataclass(frozen=True, slots=True)
class Reading:
    """What Kueue says of a job: ``workload`` is the Workload that decides (the one holding the admission the
    running job was placed under, else its generation's); ``stale`` are its other Workloads, to delete."""

    admission: Admission
    name: str  # the deciding Workload's name
    workload: WorkloadFacts | None = None
    stale: tuple[WorkloadFacts, ...] = ()

    @property
    def reason(self) -> str:
        return self.workload.evicted[0] if self.workload and self.workload.evicted else ""

    @property
    def message(self) -> str:
        """Kueue's words: the eviction's message, or why quota is not reserved yet."""
        if self.workload is None:
            return ""
        return self.workload.evicted[1] if self.workload.evicted else self.workload.waiting


def read(job: str, uid: str, generation: int, queue: str, workloads: Sequence[WorkloadFacts], placed: bool) -> Reading:
    """Which Workload decides for the job and what it says. A placed job runs under the admitted Workload it was
    placed under, even of an earlier generation (a spec change takes effect at the next placement, as it does for
    a job outside Kueue); an unplaced one waits for its own generation's Workload, and the others are stale."""
    live = [w for w in workloads if not w.deleting and not w.finished]
    name = workload_name(job, uid, generation, queue)
    current = next((w for w in live if w.name == name), None)
    holding = None
    if placed:
        admitted = [w for w in live if w.has_admission or w.evicted is not None]
        holding = current if current in admitted else (admitted[0] if admitted else None)
    deciding = holding or current
    stale = tuple(w for w in live if w is not deciding and w is not current)
    if deciding is None:
        return Reading(Admission.MISSING, name, None, stale)
    if deciding.evicted is not None:
        state = Admission.EVICTED
    elif deciding.admitted:
        state = Admission.ADMITTED
    elif placed and not deciding.has_admission:
        # The admission went without an eviction (Kueue never does that, a person might): stop as if evicted.
        state = Admission.EVICTED
    else:
        state = Admission.WAITING
    return Reading(state, deciding.name, deciding, stale)


def _set(conditions: list[dict[str, Any]], new: dict[str, Any], now: datetime) -> None:
    """Merge ``new`` into ``conditions`` as metav1 conditions are: the transition time moves when the status does."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for i, old in enumerate(conditions):
        if old.get("type") == new["type"]:
            moved = old.get("status") != new["status"]
            conditions[i] = {**new, "lastTransitionTime": stamp if moved else old.get("lastTransitionTime", stamp)}
            return
    conditions.append({**new, "lastTransitionTime": stamp})


def _patch(w: WorkloadFacts, conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": w.resource_version}, "status": {**status, "conditions": conditions}}


def release_patch(w: WorkloadFacts, now: datetime) -> dict[str, Any]:
    """The status merge patch that gives an evicted Workload's quota back once its job's pods are gone, as Kueue's
    job reconciler does: no admission, ``QuotaReserved`` False (``Pending``), ``Admitted`` False, ``Requeued``."""
    reason, message = w.evicted or ("Evicted", "the admission was removed")
    conditions = [dict(c) for c in w.conditions]
    _set(
        conditions,
        {
            "type": "Requeued",
            "status": "True" if reason in _REQUEUED_REASONS else "False",
            "reason": reason,
            "message": message[:32768],
        },
        now,
    )
    _set(conditions, {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message[:32768]}, now)
    no_reservation = "The workload has no reservation"  # Kueue's own words (workload.SyncAdmittedCondition)
    _set(conditions, {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": no_reservation}, now)
    return _patch(w, conditions, admission=None)


def finish_patch(w: WorkloadFacts, succeeded: bool, message: str, now: datetime) -> dict[str, Any]:
    """The status merge patch that marks the Workload ``Finished`` (its quota goes back to the ClusterQueue)."""
    conditions = [dict(c) for c in w.conditions]
    reason = "Succeeded" if succeeded else "Failed"
    _set(conditions, {"type": "Finished", "status": "True", "reason": reason, "message": message[:32768]}, now)
    return _patch(w, conditions)
