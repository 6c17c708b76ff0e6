"""Whether a TrainingJob's pods would be admitted, as a fact the pass is given before it preempts for the job.

A TrainingJob is a custom resource: nothing checks its ``spec.priorityClassName`` against the namespace's
ResourceQuota (its PriorityClass scopes), Pod Security or LimitRange until its pods are created, after its victims
are gone. So before preempting for one, the pass asks for a server-side dry run of one rank's pod
(``AdmissionCheck``: the pod as the job would create it), and preempts only once the answer for the job as it is
now (``AdmissionAnswer`` of the same ``signature``) says the API server would admit it. The pass itself asks nothing:
the runtime carries the checks out and feeds the answers into the next pass. A foreign gang's pods exist already:
the API server admitted them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gputopo.api.trainingjob import PlacementStatus, WorkerPlacement
from gputopo.control.facts import JobFacts, JobKey
from gputopo.control.pods import pod_manifest

__all__ = ["AdmissionAnswer", "AdmissionCheck", "admission_check", "admission_signature"]


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """One rank's pod of ``key`` to dry-run, for the job as ``signature`` says it is."""

    key: JobKey
    signature: str
    pod: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdmissionAnswer:
    """The API server's answer to a dry run: ``refusal`` its words when it would refuse the pod, "" when not."""

    signature: str
    refusal: str = ""


def admission_signature(job: JobFacts) -> str:
    """What an answer holds for: the job's uid and spec generation (a changed spec, a changed class, asks again)."""
    return f"{job.uid}/{job.generation}"


def admission_check(job: JobFacts, node: str) -> AdmissionCheck | None:
    """Rank 0's pod as the job would create it (pinned to ``node``, any node of the cluster: placement is not what
    is asked); None when the job's spec could not be read."""
    if job.spec is None:
        return None
    gpus = list(range(job.spec.gpus_per_worker))
    try:
        pod = pod_manifest(
            job.name, job.namespace, job.uid, job.spec, PlacementStatus(), WorkerPlacement(rank=0, node=node, gpus=gpus)
        )
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    return AdmissionCheck(job.key, admission_signature(job), pod)
