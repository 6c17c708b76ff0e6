"""The gangs that hold GPUs, as preemption reads them: priority, when their work started, what protects them.

A TrainingJob holds its plan from its status; its terms are its spec's (``preemption``, its checkpoint interval
among them), its priority its class's, its checkpoint the ``gputopo.io/checkpoint-time`` annotation. A foreign gang
holds its record's plan; its priority and ``preemptionPolicy`` are its pods' (the API server resolved them from their
PriorityClass; the gang's is its lowest member's), and its terms are annotations on its pods
(``gputopo.io/checkpoint-interval-seconds`` among them: a value that is not a positive number of seconds is ignored).
What protects a gang from ever being a victim is its PriorityClass's (``gputopo.io/preemptible: "false"``, an
admin's annotation), never the workload's own word; a workload's minimum runtime is bounded by the operator's
(``PreemptionRules.max_min_runtime_s``). A gang of bare pods is never a victim unless it may be
evicted (``gputopo.io/evict-bare-pods``): nobody would make its pods again. Reading never raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gputopo.api.preemption import (
    ANNOTATION_CHECKPOINT_INTERVAL,
    ANNOTATION_CHECKPOINT_TIME,
    ANNOTATION_MIN_RUNTIME,
    PreemptionStatus,
)
from gputopo.api.trainingjob import PlacementStatus
from gputopo.control.facts import JobFacts, JobKey, parse_time
from gputopo.control.gangrecords import GangRecord
from gputopo.control.preemptions import Holder, gang_name
from gputopo.control.priority import PriorityClassFacts, policy_of
from gputopo.gangs.model import Gang
from gputopo.placement.preemption import PreemptionPolicy, RunningGang, held_placement
from gputopo.placement.types import Snapshot

__all__ = [
    "checkpoint_interval",
    "gang_checkpoint",
    "gang_checkpoint_wait",
    "gang_class",
    "gang_holder",
    "gang_policy",
    "job_holder",
    "protection",
]

_MAX_INTERVAL_SECONDS = 31_536_000.0  # a year, as the TrainingJob's spec.preemption.checkpointIntervalSeconds


def _seconds(when: datetime | None) -> float | None:
    return when.timestamp() if when is not None else None


def protection(record: PreemptionStatus | None) -> tuple[float | None, frozenset[str]]:
    """When the gang was last preempted (seconds) and by whom, from its status."""
    if record is None:
        return None, frozenset()
    return _seconds(record.last_preempted_at), frozenset(record.preempted_by)


def job_holder(
    job: JobFacts,
    placement: PlacementStatus,
    priority: int,
    started: datetime | None,
    snapshot: Snapshot,
    protected: bool = False,
) -> Holder | None:
    """``started``: when its current gang started (its last placement); ``protected``: its PriorityClass keeps it
    from being a victim. None when a node of it is not known."""
    if job.spec is None or not placement.workers:
        return None
    try:
        held = held_placement(snapshot, [(w.node, w.gpus) for w in placement.workers])
    except KeyError:
        return None
    preempted_at, preempted_by = protection(job.status.preemption)
    terms = job.spec.preemption
    interval = terms.checkpoint_interval_seconds
    return Holder(
        job.key,
        RunningGang(
            gang_name(job.key),
            priority,
            held,
            start_time=_seconds(started) or 0.0,
            checkpoint_time=_seconds(job.checkpoint_time),
            preemptible=not protected,
            min_runtime_s=float(terms.min_runtime_seconds),
            preempted_at=preempted_at,
            preempted_by=preempted_by,
            checkpoint_interval_s=float(interval) if interval else None,
        ),
    )


def _annotations(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _first(gang: Gang, bodies: Mapping[str, Mapping[str, Any]], read: Any) -> Any:
    """The first member's (by rank) non-None reading of its body."""
    for member in sorted(gang.members, key=lambda m: m.rank):
        body = bodies.get(member.uid)
        if body is not None and (value := read(body)) is not None:
            return value
    return None


def gang_policy(gang: Gang, bodies: Mapping[str, Mapping[str, Any]]) -> PreemptionPolicy:
    """``Never`` when its group (a PodGroup) or any member's pod says so (the gang preempts as its most careful
    member), else the default."""
    if gang.never_preempts:
        return PreemptionPolicy.NEVER
    for member in gang.members:
        body = bodies.get(member.uid)
        spec = body.get("spec") if body is not None else None
        if isinstance(spec, Mapping) and policy_of(spec.get("preemptionPolicy")) is PreemptionPolicy.NEVER:
            return PreemptionPolicy.NEVER
    return PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def _min_runtime(body: Mapping[str, Any]) -> float | None:
    raw = _annotations(body).get(ANNOTATION_MIN_RUNTIME)
    try:
        value = float(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def checkpoint_interval(body: Mapping[str, Any]) -> float | None:
    """A pod's ``gputopo.io/checkpoint-interval-seconds``: seconds above 0 (and at most a year); anything else (text,
    0, a negative, NaN, infinity) is no interval declared."""
    raw = _annotations(body).get(ANNOTATION_CHECKPOINT_INTERVAL)
    try:
        value = float(raw) if isinstance(raw, str) else math.nan
    except ValueError:
        return None
    return value if 0 < value <= _MAX_INTERVAL_SECONDS else None


def gang_checkpoint(gang: Gang, bodies: Mapping[str, Mapping[str, Any]]) -> tuple[datetime | None, float | None]:
    """When the gang last saved its state (``gputopo.io/checkpoint-time``) and how often it saves
    (``gputopo.io/checkpoint-interval-seconds``), as its first pod (by rank) that says so says."""
    checkpoint = _first(gang, bodies, lambda b: parse_time(_annotations(b).get(ANNOTATION_CHECKPOINT_TIME)))
    return checkpoint, _first(gang, bodies, checkpoint_interval)


def gang_class(
    gang: Gang, bodies: Mapping[str, Mapping[str, Any]], classes: Mapping[str, PriorityClassFacts]
) -> PriorityClassFacts | None:
    """The gang's PriorityClass: the one its pods name (``spec.priorityClassName``, which the API server's Priority
    admission checked) whose value is the gang's priority (the first such by rank: the gang's priority is its lowest
    member's); None when no such class is known."""
    for member in sorted(gang.members, key=lambda m: m.rank):
        body = bodies.get(member.uid)
        spec = body.get("spec") if body is not None else None
        name = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
        found = classes.get(name) if isinstance(name, str) else None
        if found is not None and found.value == gang.priority:
            return found
    return None


def gang_checkpoint_wait(
    gang: Gang, bodies: Mapping[str, Mapping[str, Any]], classes: Mapping[str, PriorityClassFacts]
) -> float:
    """How long the gang may wait for its victims' next checkpoint: its PriorityClass's (``gang_class``)
    ``gputopo.io/checkpoint-wait-seconds``; 0 when no such class is known."""
    found = gang_class(gang, bodies, classes)
    return found.checkpoint_wait_s if found is not None else 0.0


def gang_holder(
    gang: Gang,
    record: GangRecord,
    bodies: Mapping[str, Mapping[str, Any]],
    snapshot: Snapshot,
    protected: bool = False,
) -> Holder | None:
    """``protected``: its PriorityClass keeps it from being a victim."""
    if not record.ranks:
        return None
    try:
        held = held_placement(snapshot, [(p.node, p.gpus) for p in record.ranks if p.gpus])
    except (KeyError, ValueError):
        return None
    if not held.workers:
        return None
    preemptible = not protected and (gang.owner is not None or gang.evict_bare)
    checkpoint, interval = gang_checkpoint(gang, bodies)
    preempted_at, preempted_by = protection(record.preemption)
    return Holder(
        JobKey(gang.id.key),
        RunningGang(
            gang_name(JobKey(gang.id.key)),
            gang.priority,
            held,
            start_time=_seconds(record.planned_at) or 0.0,
            checkpoint_time=_seconds(checkpoint),
            preemptible=preemptible,
            min_runtime_s=_first(gang, bodies, _min_runtime) or 0.0,
            preempted_at=preempted_at,
            preempted_by=preempted_by,
            checkpoint_interval_s=interval,
        ),
    )
