"""A gang's priority the Kubernetes way: a PriorityClass by name, its value and its preemptionPolicy.

A TrainingJob names a class (``spec.priorityClassName``); with none, the cluster's ``globalDefault`` class
applies (the lowest value when several claim it, as the API server does for pods); with none of those, the
deprecated ``spec.priority`` or 0. A class that does not exist is the job's error, named in its status: the API
server would refuse its pods for the same reason. Parsing never raises: an odd PriorityClass is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputopo.api.trainingjob import TrainingJobSpec
from gputopo.placement.preemption import PreemptionPolicy

__all__ = ["JobPriority", "PriorityClassFacts", "job_priority", "policy_of", "priority_class_facts"]


@dataclass(frozen=True, slots=True)
class PriorityClassFacts:
    name: str
    value: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    global_default: bool = False


def policy_of(value: Any) -> PreemptionPolicy:
    """A ``preemptionPolicy`` field: ``Never``, else the Kubernetes default ``PreemptLowerPriority``."""
    return PreemptionPolicy.NEVER if value == PreemptionPolicy.NEVER.value else PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def priority_class_facts(body: Mapping[str, Any]) -> PriorityClassFacts | None:
    meta = body.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    value = body.get("value")
    if not isinstance(name, str) or not name or not isinstance(value, int) or isinstance(value, bool):
        return None
    return PriorityClassFacts(name, value, policy_of(body.get("preemptionPolicy")), body.get("globalDefault") is True)


@dataclass(frozen=True, slots=True)
class JobPriority:
    value: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    problem: str = ""  # why the job's class cannot be used (it is then Invalid)


def job_priority(spec: TrainingJobSpec, classes: Mapping[str, PriorityClassFacts]) -> JobPriority:
    name = spec.priority_class_name
    if name:
        found = classes.get(name)
        if found is None:
            return JobPriority(0, problem=f"spec.priorityClassName: no PriorityClass named {name!r}")
        return JobPriority(found.value, found.policy)
    if spec.priority is not None:
        return JobPriority(spec.priority)
    defaults = sorted((c for c in classes.values() if c.global_default), key=lambda c: (c.value, c.name))
    if defaults:
        return JobPriority(defaults[0].value, defaults[0].policy)
    return JobPriority(0)
