"""The trace both sandbox benchmarks submit: TrainingJobs of mixed sizes (fixed seed), and the same workers as
plain pods for kube-scheduler alone.

Shared by ``bench_operator.py`` and ``bench_allocation.py`` (``gang_trace``, not ``trace``: bench/ is on
sys.path, and ``trace`` is a standard library module).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gputopo.api.group import GPU_RESOURCE, LABEL_JOB
from gputopo.sandbox.harness import training_job

__all__ = [
    "BASELINE_LABEL",
    "SIZES",
    "Job",
    "baseline_pods",
    "make_trace",
    "manifest",
    "trace_config",
    "training_jobs",
]

BASELINE_LABEL = "bench.gputopo.io/job"
# (workers, gpusPerWorker): weight in the trace
SIZES: dict[tuple[int, int], int] = {(1, 1): 15, (1, 2): 15, (1, 4): 15, (1, 8): 25, (2, 8): 18, (4, 8): 12}


@dataclass(frozen=True)
class Job:
    name: str
    workers: int
    gpus_per_worker: int

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def size(self) -> str:
        return f"{self.workers}x{self.gpus_per_worker}"

    def pods(self) -> list[str]:
        return [f"{self.name}-{rank}" for rank in range(self.workers)]


def make_trace(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    shapes = list(SIZES)
    picks = rng.choices(shapes, weights=[SIZES[s] for s in shapes], k=count)
    return [Job(f"job-{i:03d}", w, g) for i, (w, g) in enumerate(picks)]


def _container(gpus: int) -> dict[str, Any]:
    """The container of ``training_job``'s template, with the GPU limit the operator would give it."""
    return {"name": "trainer", "image": "pytorch", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}


def baseline_pods(jobs: Sequence[Job], namespace: str) -> dict[str, Any]:
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace, "labels": {BASELINE_LABEL: job.name}},
            "spec": {"restartPolicy": "Never", "containers": [_container(job.gpus_per_worker)]},
        }
        for job in jobs
        for pod in job.pods()
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def training_jobs(jobs: Sequence[Job], namespace: str) -> dict[str, Any]:
    items = [training_job(j.name, namespace, workers=j.workers, gpusPerWorker=j.gpus_per_worker) for j in jobs]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def manifest(jobs: Sequence[Job], namespace: str, operator: bool) -> tuple[dict[str, Any], str]:
    """What a side submits, and the label that selects its pods: TrainingJobs where the operator (or a floor
    client) runs, else one plain pod per worker for kube-scheduler alone."""
    if operator:
        return training_jobs(jobs, namespace), LABEL_JOB
    return baseline_pods(jobs, namespace), BASELINE_LABEL


def trace_config(trace: Sequence[Job]) -> dict[str, Any]:
    """How many jobs of each size the trace has, and the GPUs they ask for."""
    sizes = Counter((j.workers, j.gpus_per_worker) for j in trace)
    return {
        "trace_sizes": {f"{w}x{g}": n for (w, g), n in sorted(sizes.items())},
        "demand_gpus": sum(j.gpus for j in trace),
    }
