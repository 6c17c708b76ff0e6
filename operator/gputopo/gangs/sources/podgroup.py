"""Kubernetes PodGroups (``scheduling.k8s.io/v1beta1``, 1.37): a pod names its group in
``spec.schedulingGroup.podGroupName``; a gang group says its all-or-nothing size in
``spec.schedulingPolicy.gang.minCount``.

A Job with ``spec.scheduling`` gets its PodGroup from the Job controller (k8s.io/kubernetes v1.37.2
``pkg/controller/job/job_scheduling_manager.go``): named ``<workload>-<job>-pgt-0-<hash>``, with a controller
ownerReference to the Job (and a non-controller one to the Workload), so the Job's template gives the shape.
A group with the ``basic`` policy is scheduled pod by pod: it is no gang, and the pod's owner may still make one; a
group under a CompositePodGroup (``spec.parentCompositePodGroupName``) is part of a larger unit its owner declares.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

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
from gputopo.gangs.unbound import group_refusal

__all__ = ["SOURCE", "claim", "group_name"]

SOURCE: Final = "podgroup"


def group_name(pod: Raw) -> str:
    """The PodGroup the pod names; '' when it names none."""
    return text(mapping(mapping(mapping(pod.get("spec")).get("schedulingGroup"))).get("podGroupName"))


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
