"""Indexed Jobs (batch/v1, ``completionMode: Indexed``) that no JobSet runs and that have no
``spec.scheduling`` (those get a PodGroup from the Job controller): one gang per Job.

Its size is the pods the Job runs at once (``parallelism``, at most ``completions``); a pod's rank is its
completion index (``batch.kubernetes.io/job-completion-index``); every rank takes the template's GPUs.
"""

from __future__ import annotations

from typing import Final

from gputopo.gangs.annotations import read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    bounded,
    completion_index,
    controller_of,
    labels_of,
    mapping,
    namespace_of,
    owner_body,
    owner_ref,
    pod_priority,
    template_gpus,
    text,
)
from gputopo.gangs.model import Declared, GangId
from gputopo.gangs.sources.jobset import JOBSET_NAME_KEY, pods_per_job

__all__ = ["SOURCE", "claim"]

SOURCE: Final = "job"


def claim(pod: Raw, owners: Owners) -> Claim | None:
    ref = controller_of(pod)
    owner = owner_ref(ref)
    index = completion_index(pod)
    if owner is None or owner.kind != "Job" or index is None or JOBSET_NAME_KEY in labels_of(pod):
        return None
    namespace = namespace_of(pod)
    job = owner_body(owners.jobs, namespace, owner.name)
    declared = None
    pod_needs = read_needs(annotations_of(pod))
    problems = list(pod_needs.problems)
    if job is not None:
        spec = mapping(job.get("spec"))
        if text(spec.get("completionMode")) != "Indexed" or spec.get("scheduling") is not None:
            return None
        if text(controller_of(job).get("kind")) == "JobSet":
            return None
        size = bounded(pods_per_job(spec), f"Job {namespace}/{owner.name}", problems)
        gpus = template_gpus(spec.get("template"), f"Job {namespace}/{owner.name}", problems, owners, namespace)
        declared = Declared(size, (gpus,) * size) if size else None
    return Claim(
        GangId(namespace, SOURCE, owner.name),
        index,
        declared=declared,
        needs=pod_needs.needs,
        priority=pod_priority(pod),
        owner=owner,
        disruption="single",
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
    )
