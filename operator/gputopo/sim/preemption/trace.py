"""Job traces with priority classes, for replaying preemption: read from a trace file or generated."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputopo.api.clusterfile import PreemptionPolicy, TraceFile
from gputopo.sim.cluster_file import ClusterFileError, parse_file
from gputopo.sim.generate import TraceJob, generate_trace
from gputopo.sim.preemption.cluster_file import PriorityClass, priority_classes

__all__ = [
    "DEFAULT_CLASSES",
    "PriorityJob",
    "generate_priority_trace",
    "priority_trace_from_data",
    "priority_trace_to_data",
]


@dataclass(frozen=True, slots=True)
class PriorityJob:
    """A trace job with its priority class and how it takes a preemption."""

    job: TraceJob
    priority: int = 0
    priority_class: str = ""
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    checkpoint_interval_s: float | None = None
    grace_period_s: float = 30.0
    preemptible: bool = True
    min_runtime_s: float = 0.0
    checkpoint_wait_s: float = 0.0  # its class's: how long it may wait for its victims' next checkpoint

    @property
    def name(self) -> str:
        return self.job.name


def priority_trace_from_data(data: Any) -> tuple[list[PriorityJob], dict[str, PriorityClass]]:
    """A trace file's jobs with their priority classes resolved, and the classes."""
    parsed = parse_file(TraceFile, data, "a trace file has jobs: [...]")
    classes = priority_classes(parsed.priority_classes)
    out = []
    for i, j in enumerate(parsed.jobs):
        found = PriorityClass("", 0)
        if j.priority_class is not None:
            if j.priority_class not in classes:
                known = ", ".join(classes) or "none defined"
                raise ClusterFileError(
                    f"jobs[{i}].priorityClass: unknown priority class {j.priority_class!r}; known: {known}"
                )
            found = classes[j.priority_class]
        job = TraceJob(j.name, j.arrival, j.duration, j.workers, j.gpus_per_worker, j.slice_size)
        out.append(
            PriorityJob(job, found.value, found.name, found.policy, j.checkpoint_interval_seconds,
                        j.grace_period_seconds, j.preemptible, j.min_runtime_seconds, found.checkpoint_wait_s)
        )  # fmt: skip
    return out, classes


# (name, value, share of jobs, checkpoint wait): most work is low-priority research, a little is urgent. Urgent
# work preempts at once; the middle class may wait up to ten minutes for its victims' next checkpoint.
DEFAULT_CLASSES: tuple[tuple[str, int, float, float], ...] = (
    ("low", 100, 0.6, 0.0),
    ("mid", 500, 0.3, 600.0),
    ("high", 1000, 0.1, 0.0),
)


def generate_priority_trace(
    rng: random.Random,
    jobs: int,
    *,
    classes: Sequence[tuple[str, int, float, float]] = DEFAULT_CLASSES,
    checkpoint_interval_s: float = 1800.0,
    grace_period_s: float = 30.0,
    **shape: Any,
) -> tuple[list[PriorityJob], dict[str, PriorityClass]]:
    """``generate_trace``'s jobs, each given a class by the classes' shares; every job checkpoints every
    ``checkpoint_interval_s`` and gets ``grace_period_s`` to save its state when preempted."""
    base = generate_trace(rng, jobs, **shape)
    weights = [share for _, _, share, _ in classes]
    out = []
    for job in base:
        name, value, _, wait = rng.choices(list(classes), weights)[0]
        out.append(PriorityJob(job, value, name, checkpoint_interval_s=checkpoint_interval_s,
                               grace_period_s=grace_period_s, checkpoint_wait_s=wait))  # fmt: skip
    return out, {name: PriorityClass(name, value, checkpoint_wait_s=wait) for name, value, _, wait in classes}


def priority_trace_to_data(jobs: Sequence[PriorityJob], classes: Mapping[str, PriorityClass]) -> dict[str, Any]:
    return {
        "priorityClasses": [
            {"name": c.name, "value": c.value, "preemptionPolicy": c.policy.value,
             **({"checkpointWaitSeconds": c.checkpoint_wait_s} if c.checkpoint_wait_s else {})}
            for c in classes.values()
        ],
        "jobs": [
            {"name": p.job.name, "arrival": p.job.arrival, "duration": p.job.duration, "workers": p.job.workers,
             "gpusPerWorker": p.job.gpus_per_worker, **({"sliceSize": p.job.slice_size} if p.job.slice_size else {}),
             **({"priorityClass": p.priority_class} if p.priority_class else {}),
             **({"checkpointIntervalSeconds": p.checkpoint_interval_s} if p.checkpoint_interval_s else {}),
             "gracePeriodSeconds": p.grace_period_s}
            for p in jobs
        ],
    }  # fmt: skip
