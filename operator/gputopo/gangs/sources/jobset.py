"""JobSets (and TrainJobs, which run as JobSets): labels the JobSet controller puts on every child Job and pod
(kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``, set in ``pkg/controllers/jobset_controller.go``
``labelAndAnnotateObject``).

One gang per JobSet. Its size is the sum over ``spec.replicatedJobs`` of ``replicas`` times the pods each child Job
runs at once (``parallelism``, at most ``completions``); a pod's global rank counts the replicated jobs before
its own, then its Job's index, then its completion index. With ``alpha.jobset.sigs.k8s.io/exclusive-topology``
(on the JobSet or a replicated job's template, copied to the pods) each child Job is a part that takes a domain
of that node label of its own.

A TrainJob (kubeflow/trainer) runs as a JobSet whose trainer pods carry ``PET_NNODES``, the number of nodes the
TrainJob asked for (its torch plugin sets it from the trainer pod set's count). Where it differs from the pods the
pod's replicated job runs, the JobSet's count is used (it is what the Job controller makes) and the claim notes it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.gangs.annotations import read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    bounded,
    completion_index,
    controller_of,
    labels_of,
    mapping,
    namespace_of,
    owner_body,
    pod_priority,
    template_gpus,
    text,
)
from gputopo.gangs.model import Declared, GangId, OwnerRef
from gputopo.gangs.sources.pytorchjob import pod_env

__all__ = [
    "EXCLUSIVE_KEY",
    "JOBSET_NAME_KEY",
    "JOBSET_UID_KEY",
    "JOB_GLOBAL_INDEX_KEY",
    "JOB_INDEX_KEY",
    "REPLICATED_JOB_NAME_KEY",
    "SOURCE",
    "claim",
    "job_name",
    "pods_per_job",
]

SOURCE: Final = "jobset"
API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_KEY: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY: Final = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-global-index"
EXCLUSIVE_KEY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    """A child Job's name (jobset ``pkg/util/placement/placement.go`` ``GenJobName``)."""
    return f"{jobset}-{replicated_job}-{index}"


def pods_per_job(job_spec: Raw) -> int:
    """Pods a Job runs at once: ``parallelism`` (default 1), at most ``completions`` where set."""
    parallelism = as_int(job_spec.get("parallelism"))
    parallelism = 1 if parallelism is None else parallelism
    completions = as_int(job_spec.get("completions"))
    return parallelism if completions is None else min(parallelism, completions)


def _declared(
    jobset: Raw, name: str, exclusive: str | None, problems: list[str], owners: Owners, namespace: str
) -> tuple[Declared, dict[str, int], str | None]:
    """The JobSet's declaration, the first global rank of each replicated job, and its exclusive label."""
    shape: list[int] = []
    roles: list[str] = []
    parts: list[str] = []
    offsets: dict[str, int] = {}
    whole = annotations_of(jobset).get(EXCLUSIVE_KEY)
    exclusive = exclusive or whole or None
    for i, raw in enumerate(_rjobs(jobset)):
        rjob = mapping(raw)
        rjob_name = text(rjob.get("name"))
        template = mapping(rjob.get("template"))
        job_spec = mapping(template.get("spec"))
        replicas = as_int(rjob.get("replicas"))
        replicas = 1 if replicas is None else replicas
        per_job = pods_per_job(job_spec)
        gpus = template_gpus(
            job_spec.get("template"), f"JobSet {name}: spec.replicatedJobs[{i}]", problems, owners, namespace
        )
        own = annotations_of(template).get(EXCLUSIVE_KEY)
        if own and exclusive and own != exclusive:
            problems.append(
                f"JobSet {name}: replicated job {rjob_name} is exclusive by {own}, "
                f"another part by {exclusive}: one exclusive label per gang"
            )
        exclusive = exclusive or own or None
        offsets[rjob_name] = len(shape)
        if replicas > 0 and per_job > 0 and len(shape) + replicas * per_job > MAX_GANG_SIZE:
            where = f"JobSet {name}: spec.replicatedJobs[{i}]"
            bounded(len(shape) + replicas * per_job, where, problems)
            break
        for job in range(replicas):
            part = job_name(name, rjob_name, job) if (own or whole) else ""
            shape += [gpus] * per_job
            roles += [rjob_name] * per_job
            parts += [part] * per_job
    return Declared(len(shape), tuple(shape), tuple(roles), tuple(parts)), offsets, exclusive


def claim(pod: Raw, owners: Owners) -> Claim | None:
    labels = labels_of(pod)
    name = labels.get(JOBSET_NAME_KEY, "")
    if not name:
        return None
    namespace = namespace_of(pod)
    annotations = annotations_of(pod)
    pod_needs = read_needs(annotations)
    problems = list(pod_needs.problems)
    rjob_name = labels.get(REPLICATED_JOB_NAME_KEY, "")
    job_index = as_int(labels.get(JOB_INDEX_KEY))
    index = completion_index(pod)
    exclusive = annotations.get(EXCLUSIVE_KEY) or None
    jobset = owner_body(owners.jobsets, namespace, name)
    owner = OwnerRef(API_VERSION, "JobSet", name, labels.get(JOBSET_UID_KEY, ""))
    declared = None
    rank = None
    notes: tuple[str, ...] = ()
    if jobset is not None:
        declared, offsets, exclusive = _declared(jobset, name, exclusive, problems, owners, namespace)
        owner = replace(owner, uid=text(mapping(jobset.get("metadata")).get("uid")) or owner.uid)
        spec = next((mapping(r) for r in _rjobs(jobset) if text(mapping(r).get("name")) == rjob_name), None)
        if spec is None or job_index is None or index is None:
            problems.append(
                f"pod of JobSet {name}: replicated job {rjob_name or '?'}, job index "
                f"{labels.get(JOB_INDEX_KEY, '?')}, completion index {index} do not name a rank"
            )
        else:
            per_job = pods_per_job(mapping(mapping(spec.get("template")).get("spec")))
            rank = offsets[rjob_name] + job_index * per_job + index
            notes = _nnodes_note(pod, jobset, spec, per_job)
    needs = replace(pod_needs.needs, exclusive_label=exclusive) if exclusive else pod_needs.needs
    return Claim(
        GangId(namespace, SOURCE, name),
        rank,
        role=rjob_name,
        declared=declared,
        needs=needs,
        priority=pod_priority(pod),
        owner=owner,
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
        notes=notes,
    )


def _nnodes_note(pod: Raw, jobset: Raw, rjob: Raw, per_job: int) -> tuple[str, ...]:
    """A note when the pod's ``PET_NNODES`` is not the pods its replicated job runs."""
    said = pod_env(pod, "PET_NNODES")
    if said is None:
        return ()
    replicas = as_int(rjob.get("replicas"))
    runs = (1 if replicas is None else replicas) * per_job
    if as_int(said) == runs:
        return ()
    name = text(mapping(jobset.get("metadata")).get("name"))
    parent = controller_of(jobset)
    whose = f"{text(parent.get('kind'))} {text(parent.get('name'))} (JobSet {name})" if parent else f"JobSet {name}"
    pod_name = text(mapping(pod.get("metadata")).get("name"))
    return (
        f"pod {pod_name} of {whose}: PET_NNODES is {said!r}, its replicated job {text(rjob.get('name'))} runs "
        f"{runs} pods; the JobSet's count is used",
    )


def _rjobs(jobset: Raw) -> list[object]:
    rjobs = mapping(jobset.get("spec")).get("replicatedJobs")
    return rjobs if isinstance(rjobs, list) else []
