"""What the operator keeps of each watched object: small frozen facts parsed from raw bodies.

The parsers never raise on odd data: a field that does not parse is read as absent, so one malformed
object cannot stop the control loop. They are what the kopf indexes store.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NewType

from pydantic import ValidationError

from gputopo.api.fields import parse_time, whole_number, whole_numbers
from gputopo.api.gangplacement import MAX_GPU_INDEX
from gputopo.api.gpus import GpuCountError, pod_gpus
from gputopo.api.group import (
    ANNOTATION_GANG,
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT_GENERATION,
    LABEL_JOB,
    LABEL_RANK,
)
from gputopo.api.nodepodgpus import PodGpus
from gputopo.api.preemption import ANNOTATION_CHECKPOINT_TIME
from gputopo.api.trainingjob import TrainingJobSpec, TrainingJobStatus
from gputopo.gangs.unbound import Refusal, refusal
from gputopo.placement.constraints import Taint
from gputopo.topology.model import Topology

__all__ = [
    "JobFacts",
    "JobKey",
    "NodeFacts",
    "PodFacts",
    "PodGpusFacts",
    "TopologyFacts",
    "as_dict",
    "as_list",
    "format_gpus",
    "job_facts",
    "node_facts",
    "parse_gpus",
    "parse_time",
    "pod_facts",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's LocalQueue label (``kueue_quota`` says what it means)

JobKey = NewType("JobKey", tuple[str, str])  # (namespace, name): a TrainingJob's id


def parse_gpus(text: Any) -> tuple[int, ...] | None:
    """``"0,1,2"`` → (0, 1, 2); anything else → None."""
    return whole_numbers(text, most=MAX_GPU_INDEX)


def format_gpus(gpus: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(g) for g in gpus)


def _int(value: Any, default: int | None = None) -> int | None:
    found = whole_number(value)
    return default if found is None else found


def as_dict(value: Any) -> dict[str, Any]:
    """A field of an object read from the API as a dict, ``{}`` when it is absent or of another type."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """A field of an object read from the API as a list, ``[]`` when it is absent or of another type."""
    return value if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    ready: bool = True
    ready_since: datetime | None = None  # last transition of the Ready condition


def node_facts(body: Mapping[str, Any]) -> NodeFacts:
    meta, spec, status = as_dict(body.get("metadata")), as_dict(body.get("spec")), as_dict(body.get("status"))
    taints: list[Taint] = []
    for raw in as_list(spec.get("taints")):
        try:
            taints.append(Taint.from_dict(raw))
        except (KeyError, TypeError, ValueError):
            continue
    ready, since = False, None
    for cond in as_list(status.get("conditions")):
        cond = as_dict(cond)
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            since = parse_time(cond.get("lastTransitionTime"))
    return NodeFacts(
        name=str(meta.get("name", "")),
        labels={sys.intern(str(k)): sys.intern(str(v)) for k, v in as_dict(meta.get("labels")).items()},
        taints=tuple(taints),
        schedulable=not spec.get("unschedulable", False),
        ready=ready,
        ready_since=since,
    )


@dataclass(frozen=True, slots=True)
class PodFacts:
    """A pod that holds or wants GPUs, or belongs to a TrainingJob."""

    namespace: str
    name: str
    uid: str = ""
    node: str = ""
    gpus_requested: int = 0
    job: str | None = None  # the gputopo.io/job label
    rank: int | None = None
    owner_uid: str | None = None  # uid of the owning TrainingJob
    planned_gpus: tuple[int, ...] | None = None
    generation: int | None = None
    phase: str = "Pending"
    deleting: bool = False
    refusal: Refusal | None = None  # why kube-scheduler has not bound it (PodScheduled False), since when
    scheduled_at: datetime | None = None  # when kube-scheduler bound it
    created: datetime | None = None
    gang: str | None = None  # gputopo.io/gang: "<source>/<name>" of a foreign gang that gputopo steered it into

    @property
    def holder(self) -> str | None:
        """The name its planned GPUs are held under: its TrainingJob's, or its foreign gang's key name."""
        return self.job if self.job is not None else self.gang

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def holds_gpus(self) -> bool:
        """Whether the pod keeps GPUs busy (a finished pod has given its devices back)."""
        return not self.finished


def _requested_gpus(spec: Mapping[str, Any]) -> int:
    """The pod's GPU count; a count that is not whole reads as none (the API server would refuse it)."""
    try:
        return pod_gpus(spec) or 0
    except GpuCountError:
        return 0


def pod_facts(body: Mapping[str, Any]) -> PodFacts:
    meta, spec, status = as_dict(body.get("metadata")), as_dict(body.get("spec")), as_dict(body.get("status"))
    labels, annotations = as_dict(meta.get("labels")), as_dict(meta.get("annotations"))
    owner = next(
        (
            str(ref.get("uid"))
            for ref in map(as_dict, as_list(meta.get("ownerReferences")))
            if ref.get("kind") == "TrainingJob" and ref.get("uid")
        ),
        None,
    )
    scheduled_at = None
    for cond in map(as_dict, as_list(status.get("conditions"))):
        if (cond.get("type"), cond.get("status")) == ("PodScheduled", "True"):
            scheduled_at = parse_time(cond.get("lastTransitionTime"))
    job = labels.get(LABEL_JOB)
    return PodFacts(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        gpus_requested=_requested_gpus(spec),
        job=str(job) if job else None,
        rank=_int(labels.get(LABEL_RANK)),
        owner_uid=owner,
        planned_gpus=parse_gpus(annotations.get(ANNOTATION_GPUS)),
        generation=_int(annotations.get(ANNOTATION_PLACEMENT_GENERATION)),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        refusal=refusal(body),
        scheduled_at=scheduled_at,
        created=parse_time(meta.get("creationTimestamp")),
        gang=str(annotations[ANNOTATION_GANG]) if annotations.get(ANNOTATION_GANG) else None,
    )


@dataclass(frozen=True, slots=True)
class TopologyFacts:
    """A NodeTopology as the operator uses it: the pure model."""

    name: str
    topology: Topology | None  # None when the status could not be turned into a model
    error: str = ""


@dataclass(frozen=True, slots=True)
class PodGpusFacts:
    """A NodePodGpus as the operator uses it: which GPUs each pod on the node really holds, and since when."""

    name: str
    pods: tuple[PodGpus, ...] = ()
    # Per pod (namespace, name): when the probe first published its current GPU list.
    pod_since: Mapping[tuple[str, str], datetime] = field(default_factory=dict)
    # When the probe last published, unchanged pods (a heartbeat) included. Not part of equality, so a
    # heartbeat changes nothing the control loop is woken for.
    seen_at: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """One TrainingJob; ``spec`` is None when the stored spec does not parse (``spec_error`` says why)."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: datetime | None
    resource_version: str
    spec: TrainingJobSpec | None
    status: TrainingJobStatus
    spec_error: str = ""
    deleting: bool = False
    checkpoint_time: datetime | None = None  # gputopo.io/checkpoint-time: what a restart resumes from
    queue_name: str | None = None  # label kueue.x-k8s.io/queue-name: the Kueue LocalQueue whose quota it runs under

    @property
    def key(self) -> JobKey:
        return JobKey((self.namespace, self.name))


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "spec"
        parts.append(f"spec.{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def job_facts(body: Mapping[str, Any]) -> JobFacts:
    meta = as_dict(body.get("metadata"))
    spec: TrainingJobSpec | None = None
    error = ""
    try:
        spec = TrainingJobSpec.model_validate(as_dict(body.get("spec")))
    except ValidationError as exc:
        error = _errors(exc)
    try:
        status = TrainingJobStatus.model_validate(as_dict(body.get("status")))
    except ValidationError:
        status = TrainingJobStatus()  # a status we cannot read is rebuilt from the pods
    return JobFacts(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=_int(meta.get("generation"), 1) or 1,
        created=parse_time(meta.get("creationTimestamp")),
        resource_version=str(meta.get("resourceVersion", "")),
        spec=spec,
        status=status,
        spec_error=error,
        deleting=bool(meta.get("deletionTimestamp")),
        checkpoint_time=parse_time(as_dict(meta.get("annotations")).get(ANNOTATION_CHECKPOINT_TIME)),
        queue_name=str(queue) if (queue := as_dict(meta.get("labels")).get(QUEUE_LABEL)) else None,
    )
