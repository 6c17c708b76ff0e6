"""Read the gangs of a set of pods: which pods gputopo places, which gang each is a member of, at which rank.

A pod is a member when gputopo's gate holds it (``GATE``) or gputopo has steered it (annotation
``gputopo.io/gang``); a TrainingJob's own pods (label ``gputopo.io/job``) are not. Each member is claimed by
the first source that knows it (``gputopo.gangs.sources``); a pod whose explicit declarations name two
gangs is refused, and both gangs say so. A gated pod no source knows is reported as unclaimed (its gate holds it
for nothing). Nothing here raises on odd data: it is skipped or becomes a problem.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gputopo.api.fields import failure, shown
from gputopo.api.group import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_GENERATION, LABEL_JOB
from gputopo.api.trainingjob import IntraNode
from gputopo.gangs.annotations import ANNOTATION_GANG
from gputopo.gangs.claimmemo import ClaimMemo
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    gates_of,
    labels_of,
    mapping,
    namespace_of,
    template_gpus,
    text,
)
from gputopo.gangs.kueuemarks import kueue_workload, placed_by_kueue
from gputopo.gangs.model import GATE, NO_CONSTRAINTS, Declared, Gang, GangId, Member, Needs
from gputopo.gangs.sources import DERIVED, EXPLICIT, podgroup
from gputopo.gangs.unbound import refusal
from gputopo.placement.template import TemplateError, pod_constraints

__all__ = ["GangsRead", "MemberMemo", "Refusal", "claim_pod", "is_bystander", "is_member", "read_gangs"]

logger = logging.getLogger("gputopo.gangs")

# How each explicit source's declaration is named in a refusal.
_DECLARED_BY = {
    "podgroup": "PodGroup {} (spec.schedulingGroup.podGroupName)",
    "gputopo": "gang {} (label gputopo.io/gang)",
    "kueue": "Kueue pod group {} (label kueue.x-k8s.io/pod-group-name)",
}

# Owners whose labels make a pod theirs: a pod with two of them is read as the first's, and the gang says so.
_OWNER_LABELS = {
    "jobset": "JobSet {} (label jobset.sigs.k8s.io/jobset-name)",
    "leaderworkerset": "LeaderWorkerSet group {} (label leaderworkerset.sigs.k8s.io/name)",
    "pytorchjob": "PyTorchJob {} (label training.kubeflow.org/job-name)",
}
_SOURCE_NAMES = {
    "podgroup": "PodGroup",
    "gputopo": "gputopo.io/gang label",
    "kueue": "Kueue pod group",
    "jobset": "JobSet",
    "leaderworkerset": "LeaderWorkerSet",
    "pytorchjob": "PyTorchJob",
}

_UNCLAIMED = (
    "no gang source knows the pod: no PodGroup, gputopo.io/gang, Kueue pod group, JobSet, LeaderWorkerSet, "
    "PyTorchJob or Indexed Job names its gang"
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pod gputopo will not place, and why."""

    namespace: str
    pod: str
    reason: str


@dataclass(frozen=True, slots=True)
class GangsRead:
    """The gangs read from a set of pods (ordered by id), the pods refused, and the gated pods no source knows."""

    gangs: tuple[Gang, ...]
    refused: tuple[Refusal, ...] = ()
    unclaimed: tuple[Refusal, ...] = ()

    def gang(self, gang: GangId) -> Gang | None:
        return next((g for g in self.gangs if g.id == gang), None)


def is_member(pod: Raw) -> bool:
    """Whether gputopo places the pod: gated by it or steered by it, and not a TrainingJob's own."""
    if LABEL_JOB in labels_of(pod):
        return False
    return GATE in gates_of(pod) or ANNOTATION_GANG in annotations_of(pod)


def is_bystander(pod: Raw) -> bool:
    """A pod that names a PodGroup its user wrote but that gputopo neither gates nor steered (it asks for no GPU, so
    the admission policy let it through): read into its group's gang, when the gang has members, for its size and
    ranks. A group the Job controller made for one Job is declared whole by that Job's template."""
    return not is_member(pod) and LABEL_JOB not in labels_of(pod) and bool(podgroup.user_group(pod))


def _sizes_differ(taken: Claim, other: Claim) -> bool:
    """Two explicit declarations of one gang that say different sizes (one that does not say yet is no news)."""
    sizes = (taken.declared.size if taken.declared else None, other.declared.size if other.declared else None)
    return None not in sizes and sizes[0] != sizes[1]


def claim_pod(pod: Raw, owners: Owners) -> Claim | Refusal | None:
    """The claim of the first source that knows the pod, or its refusal; None when no source knows it. Where two
    sources name the pod's gang under one name but say different sizes (a PodGroup and a Kueue pod group), or two
    owners' labels both make it theirs (a JobSet's pod with a LeaderWorkerSet's labels), the first is taken and the
    claim notes the other."""
    explicit = [found for _, read in EXPLICIT if (found := read(pod, owners)) is not None]
    names = {c.gang.name for c in explicit}
    pod_name = text(mapping(pod.get("metadata")).get("name"))
    if len(names) > 1:
        named = " and ".join(_DECLARED_BY[c.gang.source].format(c.gang.name) for c in explicit)
        return Refusal(namespace_of(pod), pod_name, f"the pod names two gangs: {named}")
    if explicit:
        taken = explicit[0]
        others = [c for c in explicit[1:] if _sizes_differ(taken, c)]
        if not others:
            return taken
        said = ", ".join(
            f"{_DECLARED_BY[c.gang.source].format(c.gang.name)} {c.declared.size if c.declared else '?'} pods"
            for c in (taken, *others)
        )
        note = f"pod {pod_name}: {said}; read as the {_SOURCE_NAMES[taken.gang.source]}'s"
        return replace(taken, notes=(*taken.notes, note))
    derived = [found for _, read in DERIVED if (found := read(pod, owners)) is not None]
    if not derived:
        return None
    taken = derived[0]
    others = [c for c in derived[1:] if c.gang.source in _OWNER_LABELS]
    if taken.gang.source not in _OWNER_LABELS or not others:
        return taken
    named = " and ".join(_OWNER_LABELS[c.gang.source].format(c.gang.name) for c in (taken, *others))
    note = f"pod {pod_name} carries the labels of {named}; read as the {_SOURCE_NAMES[taken.gang.source]}'s"
    return replace(taken, notes=(*taken.notes, note))


def _created(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _gpu_list(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    counts = [as_int(p) for p in value.split(",")] if value.strip() else []
    return tuple(c for c in counts if c is not None) if all(c is not None for c in counts) else None


def _member(pod: Raw, rank: int, problems: list[str], owners: Owners) -> Member:
    meta, spec = mapping(pod.get("metadata")), mapping(pod.get("spec"))
    name = text(meta.get("name"))
    annotations = annotations_of(pod)
    gpus = template_gpus(pod, f"pod {name}", problems, owners, namespace_of(pod))
    try:
        constraints = pod_constraints(pod, "pod")
    except TemplateError as error:
        problems.append(str(error))
        constraints = NO_CONSTRAINTS
    planned = _gpu_list(annotations.get(ANNOTATION_GPUS))
    if planned is None and ANNOTATION_GPUS in annotations:
        given = shown(annotations[ANNOTATION_GPUS])
        problems.append(f"pod {name}: annotation {ANNOTATION_GPUS}: {given} is not a GPU list")
    return Member(
        pod=name,
        uid=text(meta.get("uid")),
        rank=rank,
        gpus=gpus,
        gates=gates_of(pod),
        node=text(spec.get("nodeName")) or None,
        planned=planned,
        phase=text(mapping(pod.get("status")).get("phase")) or "Pending",
        deleting=meta.get("deletionTimestamp") is not None,
        created=_created(meta.get("creationTimestamp")),
        generation=as_int(annotations.get(ANNOTATION_PLACEMENT_GENERATION)),
        constraints=constraints,
        refusal=refusal(pod),
        kueue_workload=kueue_workload(pod),
        placed_by_kueue=placed_by_kueue(pod),
        bystander=not is_member(pod),
    )


class MemberMemo:
    """The members the last read made, by pod body, for the next read to reuse: a pass then reads afresh only
    the pods that changed since (the watches keep a new body for each change). An entry holds its body, so a
    body's identity cannot be taken by another object while the entry lives. Only the pod's own fields go into a
    member, so one read from the same body at the same rank is the same member."""

    __slots__ = ("_last", "_now")

    def __init__(self) -> None:
        self._last: dict[int, tuple[Raw, int, Member, tuple[str, ...]]] = {}
        self._now: dict[int, tuple[Raw, int, Member, tuple[str, ...]]] = {}

    def member(self, pod: Raw, rank: int, owners: Owners) -> tuple[Member, tuple[str, ...]]:
        """The pod's member at ``rank`` and the problems reading it found. Its ResourceClaimTemplates (read from
        ``owners``) are taken as they were when the body was first read: a template's spec cannot change."""
        kept = self._last.get(id(pod))
        if kept is None or kept[0] is not pod or kept[1] != rank:
            problems: list[str] = []
            kept = (pod, rank, _member(pod, rank, problems, owners), tuple(problems))
        self._now[id(pod)] = kept
        return kept[2], kept[3]

    def done(self) -> None:
        """End a read: what it did not ask for is forgotten."""
        self._last, self._now = self._now, {}

    def __len__(self) -> int:
        return len(self._last)


@dataclass(slots=True)
class _Claimed:
    pod: Raw
    claim: Claim


def read_gangs(
    pods: Iterable[Mapping[str, Any]],
    owners: Owners,
    memo: MemberMemo | None = None,
    claims: ClaimMemo[Claim | Refusal | None] | None = None,
) -> GangsRead:
    """The gangs the pods gputopo places are members of, and the pods it refuses. With ``memo``, a pod whose body
    the last read with it saw is not read again; with ``claims``, nor claimed again while the owners it was
    claimed against are the same."""
    by_gang: dict[GangId, list[_Claimed]] = {}
    refused: list[Refusal] = []
    unclaimed: list[Refusal] = []
    told: dict[GangId, list[str]] = {}
    bystanders: list[Raw] = []
    for pod in pods:
        if not isinstance(pod, Mapping) or not is_member(pod):
            if isinstance(pod, Mapping) and is_bystander(pod):
                bystanders.append(pod)
            continue
        found = _fenced_claim(pod, owners) if claims is None else claims.claim(pod, owners, _fenced_claim)
        if isinstance(found, Refusal):
            refused.append(found)
            for named in _named(pod, owners):
                told.setdefault(named, []).append(f"pod {found.pod} is refused: {found.reason}")
        elif found is not None:
            by_gang.setdefault(found.gang, []).append(_Claimed(pod, found))
        else:
            name = text(mapping(pod.get("metadata")).get("name"))
            unclaimed.append(Refusal(namespace_of(pod), name, _UNCLAIMED))
    for pod in bystanders:
        found = _fenced_claim(pod, owners) if claims is None else claims.claim(pod, owners, _fenced_claim)
        if isinstance(found, Claim) and found.gang in by_gang:
            by_gang[found.gang].append(_Claimed(pod, found))
    gangs = tuple(
        _fenced_gang(gang, claimed, told.get(gang, []), owners, memo) for gang, claimed in sorted(by_gang.items())
    )
    if memo is not None:
        memo.done()
    if claims is not None:
        claims.done()
    return GangsRead(gangs, tuple(refused), tuple(unclaimed))


def _fenced_claim(pod: Raw, owners: Owners) -> Claim | Refusal | None:
    """``claim_pod``, but a pod whose reading trips a bug is refused, naming what failed: one pod never stops the
    read of the others."""
    try:
        return claim_pod(pod, owners)
    except Exception as error:
        meta = mapping(pod.get("metadata"))
        logger.debug("reading pod %s/%s failed", namespace_of(pod), text(meta.get("name")), exc_info=True)
        return Refusal(namespace_of(pod), text(meta.get("name")), f"gputopo could not read the pod: {failure(error)}")


def _named(pod: Raw, owners: Owners) -> list[GangId]:
    """The gangs a refused pod's explicit declarations name (a declaration that cannot be read names none)."""
    named = []
    for _, read in EXPLICIT:
        try:
            found = read(pod, owners)
        except Exception:
            continue
        if found is not None:
            named.append(found.gang)
    return named


def _fenced_gang(
    gang: GangId, claimed: list[_Claimed], told: list[str], owners: Owners, memo: MemberMemo | None
) -> Gang:
    """``_gang``, but a gang whose reading trips a bug is refused (its problem names what failed), with no
    members: one gang never stops the read of the others."""
    try:
        return _gang(gang, claimed, told, owners, memo)
    except Exception as error:
        logger.debug("reading gang %s failed", gang, exc_info=True)
        return Gang(gang, None, problems=(f"gputopo could not read the gang: {failure(error)}",))


def _unique(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(lines))


def _read_member(pod: Raw, rank: int, problems: list[str], owners: Owners, memo: MemberMemo | None) -> Member:
    if memo is None:
        return _member(pod, rank, problems, owners)
    member, found = memo.member(pod, rank, owners)
    problems += found
    return member


def _gang(
    gang: GangId, claimed: list[_Claimed], told: list[str], owners: Owners, memo: MemberMemo | None = None
) -> Gang:
    problems: list[str] = list(told)
    for c in claimed:
        problems += c.claim.problems
    # A gang group is ranked and declared from all its pods at once (its pods may have several owners).
    pods = [c.pod for c in claimed]
    arranged = podgroup.arrange(gang.namespace, gang.name, pods, owners) if gang.source == "podgroup" else None
    ranks: dict[int, int | None] = {id(c): c.claim.rank for c in claimed}
    if arranged is not None:
        ranks = {id(c): rank for c, rank in zip(claimed, arranged.ranks, strict=True)}
        problems += arranged.problems
    # Members with no rank from their source take the free ranks in creation order.
    taken = {r for r in ranks.values() if r is not None}
    free = (r for r in range(len(claimed) + len(taken) + 1) if r not in taken)
    for c in sorted((c for c in claimed if ranks[id(c)] is None), key=_creation):
        ranks[id(c)] = next(free)
    members = tuple(_read_member(c.pod, ranks[id(c)] or 0, problems, owners, memo) for c in claimed)
    claims = sorted((c.claim for c in claimed), key=lambda c: (c.rank is None, c.rank or 0))
    declared = arranged.declared if arranged is not None else _declared(claims, members, problems)
    live: dict[int, str] = {}
    for m in members:
        if m.gone:
            continue
        if m.rank in live:
            problems.append(f"pods {live[m.rank]} and {m.pod} are both rank {m.rank}")
        live[m.rank] = m.pod
        if declared is not None and m.rank < declared.size and m.gpus != declared.shape[m.rank]:
            problems.append(
                f"pod {m.pod} (rank {m.rank}) asks for {m.gpus} GPUs, its gang declares {declared.shape[m.rank]}"
            )
    first = claims[0]
    return Gang(
        id=gang,
        declared=declared,
        members=tuple(sorted(members, key=lambda m: (m.rank, m.pod))),
        needs=_merged([c.needs for c in claims]),
        priority=min(c.priority for c in claims),
        owner=next((c.owner for c in claims if c.owner is not None), None),
        disruption=first.disruption,
        evict_bare=any(c.evict_bare for c in claims),
        never_preempts=any(c.never_preempts for c in claims),
        group_refusal=next((c.group_refusal for c in claims if c.group_refusal is not None), None),
        problems=_unique(problems),
        disagreements=_summed(_unique(note for c in claims for note in c.notes)),
    )


def _summed(notes: tuple[str, ...], shown: int = 2) -> tuple[str, ...]:
    """The first ``shown`` notes, and how many more there are (one per pod: a gang of 512 says it once)."""
    if len(notes) <= shown:
        return notes
    return (*notes[:shown], f"and {len(notes) - shown} more pods alike")


_STRICTNESS = (IntraNode.ANY, IntraNode.NVLINK, IntraNode.NVSWITCH)


def _least(values: Iterable[int | None]) -> int | None:
    given = [v for v in values if v is not None]
    return min(given) if given else None


def _first(values: Iterable[str | None]) -> str | None:
    return next((v for v in values if v), None)


def _merged(needs: list[Needs]) -> Needs:
    """What the members' templates ask for together (roles have templates of their own, and a role's
    annotations hold for the gang): the strictest of each need, a label or slice size from the lowest rank."""
    return Needs(
        intra_node=max((n.intra_node for n in needs), key=_STRICTNESS.index),
        required_tier=_least(n.required_tier for n in needs),
        preferred_tier=_least(n.preferred_tier for n in needs),
        required_label=_first(n.required_label for n in needs),
        preferred_label=_first(n.preferred_label for n in needs),
        min_busbw_gbps=max(n.min_busbw_gbps for n in needs),
        slice_size=next((n.slice_size for n in needs if n.slice_size is not None), None),
        exclusive_label=_first(n.exclusive_label for n in needs),
    )


def _creation(c: _Claimed) -> tuple[str, str]:
    meta = mapping(c.pod.get("metadata"))
    return (text(meta.get("creationTimestamp")), text(meta.get("name")))


def _declared(claims: list[Claim], members: tuple[Member, ...], problems: list[str]) -> Declared | None:
    """The gang's declaration: its owner's, else one all members agree on (``Claim.uniform``)."""
    found = [c.declared for c in claims if c.declared is not None]
    sizes = sorted({d.size for d in found})
    if len(sizes) > 1:
        problems.append(f"the gang's pods disagree on its size: {', '.join(map(str, sizes))}")
        return None
    exact = next((c.declared for c in claims if c.declared is not None and not c.uniform), None)
    if exact is not None or not found:
        return exact
    guess = found[0]
    live = [m for m in members if not m.gone]
    counts = {m.gpus for m in live}
    if len(counts) <= 1:
        return replace(guess, shape=(counts.pop(),) * guess.size) if counts else guess
    # Members differ: the shape is known once every rank is here (Kueue admits a group only then).
    by_rank = {m.rank: m.gpus for m in live}
    if all(r in by_rank for r in range(guess.size)):
        return replace(guess, shape=tuple(by_rank[r] for r in range(guess.size)))
    return None
