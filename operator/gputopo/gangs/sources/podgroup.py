"""Kubernetes PodGroups (``scheduling.k8s.io/v1beta1``, 1.37): a pod names its group in
``spec.schedulingGroup.podGroupName``; a gang group says its all-or-nothing size in
``spec.schedulingPolicy.gang.minCount``.

A Job with ``spec.scheduling`` gets its PodGroup from the Job controller (k8s.io/kubernetes v1.37.2
``pkg/controller/job/job_scheduling_manager.go``): named ``<workload>-<job>-pgt-0-<hash>``, with a controller
ownerReference to the Job (and a non-controller one to the Workload), so the Job's template gives the shape.
A group with the ``basic`` policy is scheduled pod by pod: it is no gang, and the pod's owner may still make one; a
group under a CompositePodGroup (``spec.parentCompositePodGroupName``) is part of a larger unit its owner declares.

A group's pods may come from several owners (a launcher Job and a worker Job naming one PodGroup, as MPI-style jobs
are written on 1.37). ``arrange`` numbers the ranks of the whole group, not one pod at a time: the GPU ranks first,
then the ranks without GPUs; in each, the owners by name, and within an owner the completion index, else creation
order. Each owner is a part: as many ranks as its Job runs at once (``parallelism``, at most ``completions``) of the
Job template's GPUs, or as its pods seen, of their own GPUs, when its Job is not read. The gang is the pods that
exist, at least ``minCount``: ranks below it that no part accounts for are pods still to come, GPU ranks of the
GPUs of the owners whose size is not known (bare pods, an MPIJob's workers), otherwise ranks without GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.api.group import LABEL_RANK
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
    own_gpus,
    owner_body,
    owner_ref,
    pod_priority,
    template_gpus,
    text,
)
from gputopo.gangs.model import Declared, DisruptionMode, GangId
from gputopo.gangs.sources.jobset import pods_per_job
from gputopo.gangs.unbound import group_refusal

__all__ = ["SOURCE", "Arranged", "arrange", "claim", "group_name", "user_group"]

SOURCE: Final = "podgroup"

# What follows a Job's name in the PodGroup its controller makes for it: "-<hash of its Workload>-".
_MADE_FOR_JOB: Final = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5,10}-")


def group_name(pod: Raw) -> str:
    """The PodGroup the pod names; '' when it names none."""
    return text(mapping(mapping(mapping(pod.get("spec")).get("schedulingGroup"))).get("podGroupName"))


def user_group(pod: Raw) -> str:
    """The PodGroup the pod names when its user wrote the name (in the pod or its owner's template); '' when it names
    none, or one its Job's controller made for the Job: that Job's template declares the gang whole, and with
    ``WorkloadWithJob`` every Job's pods name such a group. The Job controller (1.37) owns that group, not the pod, and
    names it after the Job's Workload, ``<job>-<hash>-...``, the hash in ``rand.SafeEncodeString``'s letters
    (``_MADE_FOR_JOB``); a pod owned by an object of another kind, or naming a group of another name, names its
    user's."""
    name = group_name(pod)
    refs = mapping(pod.get("metadata")).get("ownerReferences")
    if any(mapping(r).get("kind") == "PodGroup" for r in (refs if isinstance(refs, list) else ())):
        return ""
    owner = owner_ref(controller_of(pod))
    made_for_job = owner is not None and owner.kind == "Job" and name.startswith(owner.name)
    return "" if made_for_job and owner is not None and _MADE_FOR_JOB.match(name, len(owner.name)) else name


def _disruption(spec: Raw) -> DisruptionMode:
    # A union of empty objects: {"all": {}} or {"single": {}}; the API defaults it to single.
    return "all" if "all" in mapping(spec.get("disruptionMode")) else "single"


def _topology_key(spec: Raw) -> str | None:
    constraints = mapping(spec.get("schedulingConstraints")).get("topology")
    for entry in constraints if isinstance(constraints, list) else ():
        key = text(mapping(entry).get("key"))
        if key:
            return key
    return None


def claim(pod: Raw, owners: Owners) -> Claim | None:
    name = group_name(pod)
    if not name:
        return None
    namespace = namespace_of(pod)
    pod_needs = read_needs(annotations_of(pod))
    problems = list(pod_needs.problems)
    rank = completion_index(pod)
    if rank is None:
        rank = as_int(labels_of(pod).get(LABEL_RANK))
    gang = GangId(namespace, SOURCE, name)
    pod_owner = owner_ref(controller_of(pod))
    group = owner_body(owners.podgroups, namespace, name)
    if group is None:  # not read yet: a member whose gang's size is unknown
        return Claim(
            gang,
            rank,
            needs=pod_needs.needs,
            priority=pod_priority(pod),
            owner=pod_owner,
            disruption="single",
            evict_bare=pod_needs.evict_bare,
            problems=tuple(problems),
        )
    spec = mapping(group.get("spec"))
    policy = mapping(spec.get("schedulingPolicy"))
    if "gang" not in policy or text(spec.get("parentCompositePodGroupName")):
        # Basic: pod by pod. Under a CompositePodGroup (a JobSet's child Job's group): the whole composite is
        # the unit, which the owner (the JobSet) declares.
        return None
    where = f"PodGroup {namespace}/{name}"
    min_count = as_int(mapping(policy.get("gang")).get("minCount"))
    owner = owner_ref(controller_of(group)) or pod_owner
    job = owner_body(owners.jobs, namespace, owner.name) if owner and owner.kind == "Job" else None
    uniform = job is None
    if job is not None:
        gpus = template_gpus(
            mapping(job.get("spec")).get("template"),
            f"Job {namespace}/{owner.name if owner else ''}",
            problems,
            owners,
            namespace,
        )
    else:
        gpus = own_gpus(pod, problems, owners)
    declared = None
    if not min_count:
        problems.append(f"{where}: spec.schedulingPolicy.gang.minCount is not a whole number ≥ 1")
    elif bounded(min_count, f"{where}: spec.schedulingPolicy.gang.minCount", problems) is not None:
        declared = Declared(min_count, (gpus,) * min_count)
    key = _topology_key(spec)
    needs = replace(pod_needs.needs, required_label=key) if key else pod_needs.needs
    priority = spec.get("priority")
    return Claim(
        gang,
        rank,
        declared=declared,
        needs=needs,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else pod_priority(pod),
        owner=owner,
        disruption=_disruption(spec),
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
        uniform=uniform,
        never_preempts=spec.get("preemptionPolicy") == "Never",
        group_refusal=group_refusal(group),
    )


@dataclass(frozen=True, slots=True)
class Arranged:
    """A gang group's ranks, one per pod given (in their order), and its declaration (None when a size cannot be
    read: ``problems`` say why)."""

    ranks: tuple[int, ...]
    declared: Declared | None
    problems: tuple[str, ...] = ()


@dataclass(slots=True)
class _Part:
    """The pods of one owner of the group (``name`` "" for pods of no controller)."""

    name: str
    kind: str
    pods: list[int]
    size: int | None = None  # from its Job
    gpus: int | None = None  # from its Job's template


def _min_count(group: Raw) -> int | None:
    spec = mapping(group.get("spec"))
    policy = mapping(spec.get("schedulingPolicy"))
    if "gang" not in policy or text(spec.get("parentCompositePodGroupName")):
        return None
    found = as_int(mapping(policy.get("gang")).get("minCount"))
    return found if found and found <= MAX_GANG_SIZE else None


def _local_ranks(members: Sequence[int], pods: Sequence[Raw]) -> dict[int, int]:
    """Each of ``members``' rank among them: its completion index (or gputopo.io/rank), the pods with neither
    taking the free ones in creation order."""
    local: dict[int, int] = {}
    unranked: list[int] = []
    for i in members:
        index = completion_index(pods[i])
        index = index if index is not None else as_int(labels_of(pods[i]).get(LABEL_RANK))
        if index is None:
            unranked.append(i)
        else:
            local[i] = index
    taken = set(local.values())
    free = (r for r in range(len(members) + len(taken) + 1) if r not in taken)
    for i in sorted(unranked, key=lambda i: _created(pods[i])):
        local[i] = next(free)
    return local


def _created(pod: Raw) -> tuple[str, str]:
    meta = mapping(pod.get("metadata"))
    return (text(meta.get("creationTimestamp")), text(meta.get("name")))


def arrange(namespace: str, name: str, pods: Sequence[Raw], owners: Owners) -> Arranged | None:
    """The ranks and declaration of gang group ``name`` from all its pods read (``pods``) and their Jobs; None
    when the PodGroup is not read, or is no gang (its claims say why)."""
    group = owner_body(owners.podgroups, namespace, name)
    min_count = _min_count(group) if group is not None else None
    if min_count is None:
        return None
    problems: list[str] = []
    parts: dict[tuple[str, str], _Part] = {}
    for i, pod in enumerate(pods):
        ref = owner_ref(controller_of(pod))
        key = (ref.kind, ref.name) if ref is not None else ("", "")
        parts.setdefault(key, _Part(key[1], key[0], [])).pods.append(i)
    gpus_of = [own_gpus(pod, [], owners) for pod in pods]
    for part in parts.values():
        job = owner_body(owners.jobs, namespace, part.name) if part.kind == "Job" else None
        if job is not None:
            spec = mapping(job.get("spec"))
            where = f"Job {namespace}/{part.name}"
            part.size = bounded(pods_per_job(spec), where, problems)
            part.gpus = template_gpus(spec.get("template"), where, problems, owners, namespace)
    if problems:
        return Arranged(tuple(0 for _ in pods), None, tuple(problems))

    where = f"PodGroup {namespace}/{name}"
    # Two segments: the GPU ranks, then the ranks without GPUs, so a launcher seen late moves no GPU rank.
    gpu = _Segment()
    cpu = _Segment()
    unknown: set[int] = set()
    for part in sorted(parts.values(), key=lambda p: (p.name, p.kind)):
        if part.size is not None and part.gpus is not None:
            segment = gpu if part.gpus else cpu
            segment.take(_local_ranks(part.pods, pods), part.size, [part.gpus] * part.size, part.name)
            continue
        with_gpus = [i for i in part.pods if gpus_of[i]]
        if with_gpus:
            local = _local_ranks(with_gpus, pods)
            size = max(local.values()) + 1
            if bounded(len(gpu.shape) + size, where, problems) is None:
                return Arranged(tuple(0 for _ in pods), None, tuple(problems))
            most = max(gpus_of[i] for i in with_gpus)
            unknown.add(most)
            by_local = {r: gpus_of[i] for i, r in local.items()}
            gpu.take(local, size, [by_local.get(r, most) for r in range(size)], part.name)
        without = sorted((i for i in part.pods if not gpus_of[i]), key=lambda i: _created(pods[i]))
        cpu.take({i: r for r, i in enumerate(without)}, len(without), [0] * len(without), part.name)
    # Ranks below minCount that no part accounts for are pods still to come: more of the bare pods' GPUs, else none.
    pad = unknown.pop() if len(unknown) == 1 else 0
    short = max(0, min_count - len(gpu.shape) - len(cpu.shape))
    (gpu if pad else cpu).take({}, short, [pad] * short, "")
    if bounded(len(gpu.shape) + len(cpu.shape), where, problems) is None:
        return Arranged(tuple(0 for _ in pods), None, tuple(problems))
    ranks = [gpu.ranks[i] if i in gpu.ranks else len(gpu.shape) + cpu.ranks[i] for i in range(len(pods))]
    shape = gpu.shape + cpu.shape
    named = gpu.roles + cpu.roles if len(parts) > 1 else []
    return Arranged(tuple(ranks), Declared(len(shape), tuple(shape), tuple(named)))


@dataclass(slots=True)
class _Segment:
    """Ranks laid out one part after another: each pod's position, and each position's GPUs and role."""

    ranks: dict[int, int] = field(default_factory=dict)
    shape: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    def take(self, local: dict[int, int], size: int, shape: list[int], role: str) -> None:
        offset = len(self.shape)
        self.ranks |= {i: offset + r for i, r in local.items()}
        self.shape += shape
        self.roles += [role] * size
