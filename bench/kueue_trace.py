"""The trace of ``bench_operator.py`` as a Kueue user submits it, for ``bench_kueue.py``.

- To Kueue's Topology-Aware Scheduling: per job a Kueue pod group (``kueue.x-k8s.io/pod-group-name`` and
  ``pod-group-total-count``) of one pod per worker, the same ``nvidia.com/gpu`` limit as the plain pods, in the
  LocalQueue of the sandbox's TAS flavor, each pod carrying the topology annotation a user would write for the
  job's tier needs: a one-pod job asks for one host (``podset-required-topology: kubernetes.io/hostname``); a
  gang of several nodes prefers one leaf switch (``podset-preferred-topology`` on the tier-0 label: Kueue tries the
  leaf, then a spine, then anywhere), the domain gputopo packs such a gang into first. Pod groups, not Indexed
  Jobs: the sandbox's kwok completes a Job's pods as soon as they run (as ``podgroup_run`` says), while the
  trace's pods hold their GPUs until the side settles.
- Under Kueue quota: the trace's TrainingJobs labelled with the LocalQueue of the flavor without a topology.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gang_trace import Job, baseline_pods, training_jobs
from gputopo.gangs.sources.kueue import GROUP_NAME_LABEL, TOTAL_COUNT_ANNOTATION
from gputopo.sandbox.kueue_queues import (
    GPUTOPO_QUEUE,
    HOSTNAME_LABEL,
    PREFERRED_TOPOLOGY,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    TAS_QUEUE,
)
from gputopo.sandbox.profiles import TIER0_LABEL

__all__ = ["queued_training_jobs", "tas_pod_groups", "topology_request"]


def topology_request(job: Job) -> tuple[str, str]:
    """The pod annotation (key, value) a Kueue user would write for ``job``'s placement."""
    if job.workers == 1:
        return REQUIRED_TOPOLOGY, HOSTNAME_LABEL
    return PREFERRED_TOPOLOGY, TIER0_LABEL


def tas_pod_groups(jobs: Sequence[Job], namespace: str, queue: str = TAS_QUEUE) -> dict[str, Any]:
    """The plain pods of ``gang_trace.baseline_pods``, each job's pods one Kueue pod group in ``queue``."""
    listed = baseline_pods(jobs, namespace)
    by_pod = {pod: job for job in jobs for pod in job.pods()}
    for item in listed["items"]:
        job = by_pod[item["metadata"]["name"]]
        item["metadata"]["labels"] |= {QUEUE_LABEL: queue, GROUP_NAME_LABEL: job.name}
        key, level = topology_request(job)
        item["metadata"]["annotations"] = {TOTAL_COUNT_ANNOTATION: str(job.workers), key: level}
    return listed


def queued_training_jobs(jobs: Sequence[Job], namespace: str, queue: str = GPUTOPO_QUEUE) -> dict[str, Any]:
    """The trace's TrainingJobs, each labelled for the LocalQueue ``queue``."""
    listed = training_jobs(jobs, namespace)
    for item in listed["items"]:
        item["metadata"]["labels"] = {**(item["metadata"].get("labels") or {}), QUEUE_LABEL: queue}
    return listed
