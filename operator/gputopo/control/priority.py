"""A gang's priority the Kubernetes way: a PriorityClass by name, its value and its preemptionPolicy.

A TrainingJob names a class (``spec.priorityClassName``); with none, the cluster's ``globalDefault`` class
applies (the lowest value when several claim it, as the API server does for pods); with none of those, 0. The
deprecated ``spec.priority`` needs no PriorityClass, so it is held to what Kubernetes grants a pod that names no
class: it may lower a job's priority below that (a job may always yield), never raise it above. A class that does
not exist is the job's error, named in its status: the API server would refuse its pods for the same reason.
Parsing never raises: an odd PriorityClass is skipped.

A class, and only a class (an admin's object, not the workload), protects its gangs from preemption: the annotation
``gputopo.io/preemptible: "false"``.

A class may let its gangs wait for their victims' next checkpoint rather than preempt them at once: the annotation
``gputopo.io/checkpoint-wait-seconds`` (0 to 86400 seconds, counted from when the gang was queued). A value that
does not parse as such reads as 0 (preempt at once), and the facts say why (``error``), for the operator's log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputopo.api.preemption import ANNOTATION_CHECKPOINT_WAIT, ANNOTATION_PREEMPTIBLE, MAX_CHECKPOINT_WAIT_SECONDS
from gputopo.api.trainingjob import TrainingJobSpec
from gputopo.placement.preemption import PreemptionPolicy

__all__ = [
    "JobPriority",
    "PriorityClassFacts",
    "checkpoint_wait_of",
    "job_priority",
    "policy_of",
    "priority_class_facts",
]


@dataclass(frozen=True, slots=True)
class PriorityClassFacts:
    name: str
    value: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    global_default: bool = False
    checkpoint_wait_s: float = 0.0  # gputopo.io/checkpoint-wait-seconds
    error: str = ""  # what of the class could not be read (and was read as its default)
    protected: bool = False  # gputopo.io/preemptible: "false": its gangs are never victims


def policy_of(value: Any) -> PreemptionPolicy:
    """A ``preemptionPolicy`` field: ``Never``, else the Kubernetes default ``PreemptLowerPriority``."""
    return PreemptionPolicy.NEVER if value == PreemptionPolicy.NEVER.value else PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def checkpoint_wait_of(raw: Any) -> tuple[float, str]:
    """The ``gputopo.io/checkpoint-wait-seconds`` annotation's seconds, and what was wrong with it: anything but a
    number from 0 to ``MAX_CHECKPOINT_WAIT_SECONDS`` reads as 0 (the class's gangs preempt at once)."""
    if raw is None:
        return 0.0, ""
    try:
        seconds = float(raw) if isinstance(raw, str) else math.nan
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_CHECKPOINT_WAIT_SECONDS:  # NaN fails this too
        text = repr(raw) if isinstance(raw, str) else f"of type {type(raw).__name__}"
        return 0.0, (
            f"annotation {ANNOTATION_CHECKPOINT_WAIT} {text} is not a number of seconds from 0 to "
            f"{MAX_CHECKPOINT_WAIT_SECONDS}: read as 0 (its gangs preempt at once)"
        )
    return seconds, ""


def priority_class_facts(body: Mapping[str, Any]) -> PriorityClassFacts | None:
    meta = body.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    value = body.get("value")
    if not isinstance(name, str) or not name or not isinstance(value, int) or isinstance(value, bool):
        return None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = annotations.get(ANNOTATION_CHECKPOINT_WAIT) if isinstance(annotations, Mapping) else None
    wait, problem = checkpoint_wait_of(raw)
    return PriorityClassFacts(
        name,
        value,
        policy_of(body.get("preemptionPolicy")),
        body.get("globalDefault") is True,
        wait,
        f"PriorityClass {name}: {problem}" if problem else "",
        isinstance(annotations, Mapping) and annotations.get(ANNOTATION_PREEMPTIBLE) == "false",
    )


@dataclass(frozen=True, slots=True)
class JobPriority:
    value: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    problem: str = ""  # why the job's class cannot be used (it is then Invalid)
    checkpoint_wait_s: float = 0.0  # its class's: how long it may wait for its victims' next checkpoint
    protected: bool = False  # its class's gputopo.io/preemptible "false": never a victim
    class_name: str = ""  # the PriorityClass it has it from ("" for none)


def job_priority(spec: TrainingJobSpec, classes: Mapping[str, PriorityClassFacts]) -> JobPriority:
    name = spec.priority_class_name
    if name:
        found = classes.get(name)
        if found is None:
            return JobPriority(0, problem=f"spec.priorityClassName: no PriorityClass named {name!r}")
        return JobPriority(found.value, found.policy, "", found.checkpoint_wait_s, found.protected, found.name)
    defaults = sorted((c for c in classes.values() if c.global_default), key=lambda c: (c.value, c.name))
    granted = JobPriority(0)
    if defaults:
        first = defaults[0]
        granted = JobPriority(first.value, first.policy, "", first.checkpoint_wait_s, first.protected, first.name)
    if spec.priority is not None and spec.priority < granted.value:
        return JobPriority(spec.priority, granted.policy, protected=granted.protected)
    return granted
