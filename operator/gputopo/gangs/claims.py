"""What one source says about one pod: the gang it belongs to, its rank and what the gang declares.

A source reads a pod and, where it can, the object above it (``Owners``: raw bodies as the API server serves
them, keyed by (namespace, name)). Every reader here takes free-form data and never raises: a field of the
wrong shape reads as absent, or as a problem naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gputopo.api.fields import shown, whole_number
from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.api.gpus import GpuCountError, pod_gpus
from gputopo.api.group import DRA_DEVICE_CLASS
from gputopo.gangs.annotations import PodNeeds
from gputopo.gangs.model import Declared, DisruptionMode, GangId, Needs, OwnerRef
from gputopo.gangs.unbound import Refusal

__all__ = [
    "COMPLETION_INDEX",
    "Claim",
    "Owners",
    "Raw",
    "annotations_of",
    "as_int",
    "bare_claim",
    "bounded",
    "claim_template_gpus",
    "completion_index",
    "controller_of",
    "gates_of",
    "group_size",
    "labels_of",
    "mapping",
    "namespace_of",
    "own_gpus",
    "owner_body",
    "owner_ref",
    "pod_priority",
    "template_gpus",
    "text",
]

Raw = Mapping[str, Any]
Key = tuple[str, str]

# batch/v1: the Job controller puts an Indexed Job pod's index in this annotation and (since 1.28) label.
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class Owners:
    """The objects gangs are declared by, as read from the API server: (namespace, name) → raw body.

    A kind gputopo does not watch (its CRD is not installed) is simply empty. ``claim_templates`` (DRA mode only;
    None otherwise) holds each ResourceClaimTemplate's GPU count (``claim_template_gpus``): a pod's GPUs are then
    its ``nvidia.com/gpu`` and those of the claims it makes from templates."""

    podgroups: Mapping[Key, Raw] = field(default_factory=dict)
    jobs: Mapping[Key, Raw] = field(default_factory=dict)
    jobsets: Mapping[Key, Raw] = field(default_factory=dict)
    leaderworkersets: Mapping[Key, Raw] = field(default_factory=dict)
    pytorchjobs: Mapping[Key, Raw] = field(default_factory=dict)
    claim_templates: Mapping[Key, int | str] | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """One source's reading of one pod.

    ``rank`` is None where the source gives pods no rank (a PodGroup of bare pods): ``read_gangs`` numbers
    such members in creation order. ``declared`` is None while the size is unknown (the owner not read yet).
    ``uniform`` says the declared shape is this pod's own GPU count for every rank, a guess ``read_gangs``
    checks against the other members."""

    gang: GangId
    rank: int | None
    role: str = ""
    declared: Declared | None = None
    needs: Needs = field(default_factory=Needs)
    priority: int = 0
    owner: OwnerRef | None = None
    disruption: DisruptionMode = "all"
    evict_bare: bool = False
    problems: tuple[str, ...] = ()
    uniform: bool = False
    never_preempts: bool = False  # its group's preemptionPolicy is Never (a PodGroup's)
    group_refusal: Refusal | None = None  # its PodGroup's scheduled condition, False
    notes: tuple[str, ...] = ()  # where this pod's sources disagree, and which was taken


def mapping(value: object) -> Raw:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> Mapping[str, str]:
    return {k: v for k, v in mapping(value).items() if isinstance(k, str) and isinstance(v, str)}


def labels_of(obj: Raw) -> Mapping[str, str]:
    return _strings(mapping(obj.get("metadata")).get("labels"))


def annotations_of(obj: Raw) -> Mapping[str, str]:
    return _strings(mapping(obj.get("metadata")).get("annotations"))


def text(value: object) -> str:
    return value if isinstance(value, str) else ""


def gates_of(pod: Raw) -> tuple[str, ...]:
    """The names of the pod's scheduling gates, in order (entries without a name left out)."""
    raw = mapping(pod.get("spec")).get("schedulingGates")
    names = (text(mapping(g).get("name")) for g in (raw if isinstance(raw, list) else ()))
    return tuple(name for name in names if name)


def as_int(value: object) -> int | None:
    """A whole number ≥ 0 from an int or a string of at most ``MAX_DIGITS`` ASCII digits; None for anything else
    (``gputopo.api.fields.whole_number``: a 5,000-digit label is a bad value, not an exception)."""
    return whole_number(value)


def controller_of(obj: Raw) -> Raw:
    """The ownerReference with ``controller: true``; empty when there is none."""
    refs = mapping(obj.get("metadata")).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return {}


def owner_ref(ref: Raw) -> OwnerRef | None:
    """An ownerReference as an ``OwnerRef``; None when it names no kind and name."""
    kind, name = text(ref.get("kind")), text(ref.get("name"))
    if not kind or not name:
        return None
    return OwnerRef(text(ref.get("apiVersion")), kind, name, text(ref.get("uid")))


def claim_template_gpus(body: Raw, device_class: str = DRA_DEVICE_CLASS) -> int | str:
    """The GPUs a ResourceClaimTemplate asks for (its requests of NVIDIA's GPU class, ``device_class``), or why
    they cannot be counted."""
    devices = mapping(mapping(mapping(body.get("spec")).get("spec")).get("devices"))
    requests = devices.get("requests")
    total = 0
    for raw in requests if isinstance(requests, list) else ():
        request = mapping(raw)
        name = text(request.get("name"))
        subrequests = request.get("firstAvailable")
        if isinstance(subrequests, list) and any(
            text(mapping(s).get("deviceClassName")) == device_class for s in subrequests
        ):
            return f"request {name} has subrequests of {device_class}: the GPU count is not known before allocation"
        exactly = mapping(request.get("exactly"))
        if text(exactly.get("deviceClassName")) != device_class:
            continue
        if exactly.get("allocationMode") == "All":
            return f"request {name} asks for all devices of {device_class} on a node: no GPU count to plan"
        count = exactly.get("count", 1)
        found = as_int(count)
        if found is None:
            return f"request {shown(name)}: count {shown(count)} is not a whole number"
        total += found
    return total


def _claimed_gpus(spec: Raw, namespace: str, owners: Owners, where: str, problems: list[str]) -> int:
    """The GPUs of the claims a pod (template) spec makes from ResourceClaimTemplates (DRA mode only)."""
    templates = owners.claim_templates
    entries = spec.get("resourceClaims")
    if templates is None or not isinstance(entries, list):
        return 0
    total = 0
    for entry in entries:
        name = text(mapping(entry).get("resourceClaimTemplateName"))
        if not name:
            continue
        found = templates.get((namespace, name))
        if found is None:
            problems.append(f"{where}: ResourceClaimTemplate {namespace}/{name} is not read (yet)")
        elif isinstance(found, str):
            problems.append(f"{where}: ResourceClaimTemplate {namespace}/{name}: {found}")
        else:
            total += found
    return total


def template_gpus(template: object, where: str, problems: list[str], owners: Owners, namespace: str) -> int:
    """The GPUs a pod template (``{metadata, spec}``) asks for: ``nvidia.com/gpu``, and in DRA mode those of the
    claims it makes from templates; 0 when none, a problem when not whole or not known."""
    spec = mapping(mapping(template).get("spec"))
    try:
        gpus = pod_gpus(spec) or 0
    except GpuCountError as error:
        problems.append(f"{where}: {error}")
        gpus = 0
    return gpus + _claimed_gpus(spec, namespace, owners, where, problems)


def namespace_of(obj: Raw) -> str:
    return text(mapping(obj.get("metadata")).get("namespace")) or "default"


def pod_priority(pod: Raw) -> int:
    """``spec.priority``, resolved from the pod's PriorityClass by the API server's admission; 0 when unset."""
    value = mapping(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def completion_index(pod: Raw) -> int | None:
    """An Indexed Job pod's completion index (its label, else its annotation)."""
    found = as_int(labels_of(pod).get(COMPLETION_INDEX))
    return found if found is not None else as_int(annotations_of(pod).get(COMPLETION_INDEX))


def own_gpus(pod: Raw, problems: list[str], owners: Owners) -> int:
    """The GPUs the pod itself asks for; 0 when none, a problem when not a whole number."""
    return template_gpus(pod, "pod", problems, owners, namespace_of(pod))


def owner_body(bodies: Mapping[Key, Raw], namespace: str, name: str) -> Raw | None:
    """The owner object read as (namespace, name); None when it was not read, or is not an object."""
    found = bodies.get((namespace, name))
    return found if isinstance(found, Mapping) else None


def bounded(size: int | None, where: str, problems: list[str]) -> int | None:
    """``size`` when a gang may hold that many pods; None, with the problem said, when it is more (a replica
    count of a billion is an error to name, not a list to build)."""
    if size is not None and size > MAX_GANG_SIZE:
        problems.append(f"{where}: {size} pods, more than a gang may hold ({MAX_GANG_SIZE})")
        return None
    return size


def group_size(raw: str | None, where: str, problems: list[str]) -> int | None:
    """A gang's size as a label or annotation of its pods gives it (``where`` names which), or None with the
    problem said."""
    size = as_int(raw)
    if size is not None and size > MAX_GANG_SIZE:
        problems.append(f"{where}: {shown(raw)} is more pods than a gang may hold ({MAX_GANG_SIZE})")
        return None
    if size is not None and size >= 1:
        return size
    what = "missing" if raw is None else f"{shown(raw)} is not a whole number from 1 to {MAX_GANG_SIZE}"
    problems.append(f"{where}: {what}")
    return None


def bare_claim(
    pod: Raw,
    gang: GangId,
    rank: int | None,
    declared: Declared | None,
    pod_needs: PodNeeds,
    problems: list[str],
    *,
    uniform: bool = False,
) -> Claim:
    """The claim of a source that reads its gang from the pod itself (gputopo's contract, Kueue's pod groups):
    its owner is whatever controls the pod, if anything does."""
    return Claim(
        gang,
        rank,
        declared=declared,
        needs=pod_needs.needs,
        priority=pod_priority(pod),
        owner=owner_ref(controller_of(pod)),
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
        uniform=uniform,
    )
