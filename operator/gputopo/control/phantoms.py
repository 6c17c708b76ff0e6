"""How many GPUs a gang whose size is only its own pods' word may hold (pure): no GPUs for ranks that do not exist.

A gang of bare pods (pods labelled ``gputopo.io/gang``, a Kueue pod group) declares its size on its pods, and
nothing above them says the other pods will ever come: one pod may declare 8,192 ranks. Such a gang is planned,
and so holds GPUs, only when the ranks still to come fit what its namespace's ResourceQuotas still allow of
``requests.nvidia.com/gpu`` (hard minus used: the pods that exist are already counted in used, so the ranks still
to come are what they must admit). A namespace with no quota on GPUs lets a gang plan at most ``headroom`` ranks
that do not exist yet (0 by default: every rank's pod must exist). A gang whose owner declares its size (a
PodGroup, Job, JobSet, LeaderWorkerSet, PyTorchJob) is not held to this: its owner makes its pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gputopo.api.fields import whole_number
from gputopo.api.group import GPU_RESOURCE
from gputopo.gangs.model import Gang

__all__ = ["QUOTA_KEY", "QuotaRoom", "phantom_wait", "quota_room", "quota_room_of"]

QUOTA_KEY: Final = f"requests.{GPU_RESOURCE}"  # the only quota key an extended resource has


@dataclass(frozen=True, slots=True)
class QuotaRoom:
    """One ResourceQuota's GPUs: its namespace and how many more GPUs it admits (hard minus used, never below 0);
    ``room`` is None when the quota does not limit GPUs."""

    namespace: str
    room: int | None


def quota_room_of(obj: Mapping[str, Any]) -> QuotaRoom | None:
    """A ResourceQuota as read: its GPUs' room from ``status`` (what the quota controller counted). A quota whose
    hard limit on GPUs cannot be read, or whose use is not counted yet, admits none (a limit gputopo cannot read
    is not room). None for an object with no namespace. Never raises."""
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if not isinstance(namespace, str) or not namespace:
        return None
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    hard_of = status.get("hard") if isinstance(status.get("hard"), Mapping) else spec.get("hard")
    hard_of = hard_of if isinstance(hard_of, Mapping) else {}
    if QUOTA_KEY not in hard_of:
        return QuotaRoom(namespace, None)
    used_of = status.get("used")
    hard = whole_number(hard_of.get(QUOTA_KEY))
    used = whole_number(used_of.get(QUOTA_KEY)) if isinstance(used_of, Mapping) else None
    if hard is None or used is None:
        return QuotaRoom(namespace, 0)
    return QuotaRoom(namespace, max(0, hard - used))


def quota_room(quotas: Iterable[QuotaRoom]) -> dict[str, int]:
    """Each namespace's room for more GPUs: the least of its quotas that limit GPUs (every quota must admit a pod).
    A namespace with no quota on GPUs is absent."""
    out: dict[str, int] = {}
    for quota in quotas:
        if quota.room is not None:
            out[quota.namespace] = min(quota.room, out.get(quota.namespace, quota.room))
    return out


def phantom_wait(gang: Gang, room: Mapping[str, int], headroom: int | None = 0) -> str | None:
    """Why ``gang`` may not be planned yet: its size is only its pods' word and its ranks with no pod need more
    GPUs than its namespace's quota still allows (or, with no quota on GPUs, more ranks than ``headroom``; None:
    no cap there). None when it may be planned."""
    declared = gang.declared
    if gang.owner is not None or declared is None:
        return None
    missing = gang.missing()
    if not missing:
        return None
    exist = sum(1 for m in gang.by_rank.values() if not m.gone and m.rank < declared.size)
    said = f"declares {declared.size} ranks, {exist} exist"
    need = sum(declared.shape[r] for r in missing if r < len(declared.shape))
    allowed = room.get(gang.id.namespace)
    if allowed is None:
        if headroom is None or len(missing) <= headroom:
            return None
        return (
            f"{said}; its namespace has no quota on {QUOTA_KEY}, and gputopo holds GPUs for at most {headroom} "
            f"ranks of bare pods that do not exist yet: it waits for its pods"
        )
    if need <= allowed:
        return None
    return f"{said}; namespace quota allows {allowed} more GPUs, its ranks with no pod need {need}: it waits"
