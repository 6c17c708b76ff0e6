"""A foreign gang's record: its ``GangPlacement``, as the operator reads it back and writes it.

The record holds the gang's plan (a node and GPUs per rank) from the moment it is made until the gang is gone,
also for ranks whose pods do not exist yet (a LeaderWorkerSet creates its workers only once the leader is
placed), so no other plan takes those GPUs meanwhile. A record names whether the gang has an owner (its
``ownerReferences``: the garbage collector deletes it with the owner) and, once no pod of the gang is left, since
when (``status.podsGoneAt``: a record of a gang with no owner is deleted some time after, ``gangretention``).
Parsing never raises: a field that does not parse reads as absent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import ValidationError

from gputopo.api.fields import whole_number
from gputopo.api.group import API_VERSION
from gputopo.api.preemption import NominationStatus, PreemptionStatus
from gputopo.control.facts import JobKey, as_dict, parse_time
from gputopo.control.ledger import PlannedGang
from gputopo.gangs.model import Gang, GangId

__all__ = [
    "KIND",
    "PLURAL",
    "GangRecord",
    "RankPlan",
    "planned_from_records",
    "record_body",
    "record_facts",
    "record_name",
    "status_of",
]

KIND: Final = "GangPlacement"
PLURAL: Final = "gangplacements"
_SOURCES: Final = ("podgroup", "gputopo", "kueue", "jobset", "leaderworkerset", "pytorchjob", "job")
_NAME_LIMIT: Final = 253
M = TypeVar("M", NominationStatus, PreemptionStatus)


@dataclass(frozen=True, slots=True)
class RankPlan:
    rank: int
    node: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...] = ()
    pod: str = ""  # the pod steered there, once one was
    role: str = ""


@dataclass(frozen=True, slots=True)
class GangRecord:
    key: JobKey
    name: str
    uid: str = ""
    phase: str = "Pending"
    message: str = ""
    generation: int = 0  # counts the gang's plans
    ranks: tuple[RankPlan, ...] = ()
    planned_at: datetime | None = None
    restarts: int = 0
    last_restart_reason: str = ""
    busbw_gbps: float = 0.0
    bottleneck: str = ""
    tier: int | None = None
    missing: tuple[int, ...] = ()
    released_with: int | None = None  # live members when the plan was released for want of the rest
    nomination: NominationStatus | None = None  # GPUs held for the gang while its victims terminate
    preemption: PreemptionStatus | None = None  # how it was preempted, if it was
    pods_gone_at: datetime | None = None  # since when no pod of the gang is left
    owned: bool = False  # it has an owner (ownerReferences, spec.owner): the garbage collector deletes it
    resource_version: str = ""  # as read: a deletion is refused when the record changed since

    @property
    def plan(self) -> dict[int, RankPlan]:
        return {r.rank: r for r in self.ranks}


def record_name(gang: GangId) -> str:
    """``<source>-<name>``; a name too long for the API keeps its start and ends in a digest of the whole."""
    name = f"{gang.source}-{gang.name}"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _NAME_LIMIT - 11].rstrip('-.')}-{digest}"


def _int(value: Any, default: int = 0) -> int:
    found = whole_number(value)
    return default if found is None else found


def _rank(raw: Any) -> RankPlan | None:
    raw = as_dict(raw)
    rank, node = raw.get("rank"), raw.get("node")
    if not isinstance(rank, int) or rank < 0 or not isinstance(node, str) or not node:
        return None
    gpus = raw.get("gpus") if isinstance(raw.get("gpus"), list) else []
    nics = raw.get("nics") if isinstance(raw.get("nics"), list) else []
    return RankPlan(
        rank,
        node,
        tuple(g for g in gpus if isinstance(g, int) and g >= 0),
        tuple(str(n) for n in nics),
        str(raw.get("pod") or ""),
        str(raw.get("role") or ""),
    )


def record_facts(body: Mapping[str, Any]) -> GangRecord | None:
    """The record of one GangPlacement; None when it names no gang (not one of ours to read)."""
    meta, spec, status = as_dict(body.get("metadata")), as_dict(body.get("spec")), as_dict(body.get("status"))
    source, gang, namespace = spec.get("source"), spec.get("gang"), meta.get("namespace")
    if source not in _SOURCES or not isinstance(gang, str) or not gang or not isinstance(namespace, str):
        return None
    raw_ranks = status.get("ranks")
    ranks = tuple(r for r in map(_rank, raw_ranks if isinstance(raw_ranks, list) else []) if r is not None)
    tier = status.get("tier")
    raw_missing = status.get("missingRanks")
    missing: list[Any] = raw_missing if isinstance(raw_missing, list) else []
    released = status.get("releasedWith")
    try:
        busbw = float(status.get("estimatedBusBandwidthGBps") or 0.0)
    except (TypeError, ValueError):
        busbw = 0.0
    return GangRecord(
        key=JobKey((namespace, f"{source}/{gang}")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        owned=_owned(meta, spec),
        phase=str(status.get("phase") or "Pending"),
        message=str(status.get("message") or ""),
        generation=max(0, _int(status.get("generation"))),
        ranks=ranks,
        planned_at=parse_time(status.get("plannedAt")),
        restarts=max(0, _int(status.get("restarts"))),
        last_restart_reason=str(status.get("lastRestartReason") or ""),
        busbw_gbps=busbw,
        bottleneck=str(status.get("bottleneck") or ""),
        tier=tier if isinstance(tier, int) else None,
        missing=tuple(r for r in missing if isinstance(r, int)),
        released_with=released if isinstance(released, int) else None,
        nomination=_model(NominationStatus, status.get("nomination")),
        preemption=_model(PreemptionStatus, status.get("preemption")),
        pods_gone_at=parse_time(status.get("podsGoneAt")),
    )


def _owned(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether the record has an owner, by its ownerReferences or the owner its spec names. Anything that is there
    but does not parse counts as an owner: a record is deleted by the operator only when surely ownerless."""
    refs = meta.get("ownerReferences")
    return bool(refs) or spec.get("owner") is not None


def _model(kind: type[M], raw: Any) -> M | None:
    if not isinstance(raw, dict):
        return None
    try:
        return kind.model_validate(raw)
    except ValidationError:
        return None


def record_body(gang: Gang) -> dict[str, Any]:
    """The GangPlacement to create for a gang: owned by the gang's owner, so it goes with it."""
    meta: dict[str, Any] = {"name": record_name(gang.id), "namespace": gang.id.namespace}
    if gang.owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": gang.owner.api_version,
                "kind": gang.owner.kind,
                "name": gang.owner.name,
                "uid": gang.owner.uid,
            }
        ]
    spec: dict[str, Any] = {"source": gang.id.source, "gang": gang.id.name}
    if gang.declared is not None:
        spec["size"] = gang.declared.size
    if gang.owner is not None:
        spec["owner"] = {
            "apiVersion": gang.owner.api_version,
            "kind": gang.owner.kind,
            "name": gang.owner.name,
            "uid": gang.owner.uid,
        }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def status_of(record: GangRecord, **changes: Any) -> dict[str, Any]:
    """The whole status of ``record`` with ``changes`` (by the record's field names) applied, in API form."""
    r = replace(record, **changes)
    return {
        "phase": r.phase,
        "message": r.message,
        "generation": r.generation,
        "ranks": [
            {
                "rank": p.rank,
                "node": p.node,
                "gpus": list(p.gpus),
                **({"nics": list(p.nics)} if p.nics else {}),
                **({"pod": p.pod} if p.pod else {}),
                **({"role": p.role} if p.role else {}),
            }
            for p in sorted(r.ranks, key=lambda p: p.rank)
        ],
        "nodes": sorted({p.node for p in r.ranks}),
        "nodeCount": len({p.node for p in r.ranks}),
        "gpuCount": sum(len(p.gpus) for p in r.ranks),
        "estimatedBusBandwidthGBps": round(r.busbw_gbps, 3),
        "bottleneck": r.bottleneck,
        "tier": r.tier,
        "missingRanks": list(r.missing),
        "restarts": r.restarts,
        "lastRestartReason": r.last_restart_reason or None,
        "plannedAt": r.planned_at.isoformat() if r.planned_at else None,
        "releasedWith": r.released_with,
        "nomination": r.nomination.to_api() if r.nomination is not None else None,
        "preemption": r.preemption.to_api() if r.preemption is not None else None,
        "podsGoneAt": r.pods_gone_at.isoformat() if r.pods_gone_at else None,
    }


def planned_from_records(records: Iterable[GangRecord], skip: Sequence[JobKey] = ()) -> list[PlannedGang]:
    """The plans the records hold, for the snapshot: every rank's GPUs, its pod bound or not. A Released record
    holds none (it may still say where its ended pods ran), nor does a Preempted one (its pods are being evicted,
    and the GPUs are held for its preemptor by the preemptor's nomination)."""
    skipped = set(skip)
    return [
        PlannedGang(r.key, r.generation, tuple((p.node, p.gpus) for p in r.ranks))
        for r in records
        if r.ranks and r.phase not in ("Released", "Preempted") and r.key not in skipped
    ]
