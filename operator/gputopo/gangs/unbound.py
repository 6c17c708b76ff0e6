"""Why kube-scheduler has not bound a pod, as it writes it: the pod's ``PodScheduled`` condition, False, with its
reason and message, and a PodGroup's ``PodGroupInitiallyScheduled`` condition (``PodGroupScheduled`` before 1.37),
False. Any reason counts: ``Unschedulable`` (no node fits the pod, its planned node included), ``SchedulerError``
(kube-scheduler refused the pod for itself, e.g. a pod whose priority differs from its PodGroup's), or a reason a
later kube-scheduler adds. ``SchedulingGated`` does not: the pod is held by a gate, not refused.

A steered pod that kube-scheduler does not bind within the timeout is given up (``give_up_at``): the TrainingJob
lifecycle and the foreign gangs' step both ask this one rule. Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from gputopo.api.fields import parse_time

__all__ = ["GROUP_CONDITIONS", "SCHEDULING_GATED", "UNSCHEDULABLE", "Refusal", "give_up_at", "group_refusal", "refusal"]

UNSCHEDULABLE: Final = "Unschedulable"  # no node fits the pod: another node may
SCHEDULING_GATED: Final = "SchedulingGated"  # the pod waits on a scheduling gate: nothing was refused
# A PodGroup's condition that it has been scheduled, by its 1.37 name and its earlier one.
GROUP_CONDITIONS: Final = ("PodGroupInitiallyScheduled", "PodGroupScheduled")

_MESSAGE_LIMIT = 300  # of kube-scheduler's message, as quoted in a gang's status


@dataclass(frozen=True, slots=True)
class Refusal:
    """kube-scheduler's word that it has not bound a pod (or scheduled a PodGroup): since when, and why."""

    reason: str
    message: str = ""
    since: datetime | None = None  # the condition's lastTransitionTime

    @property
    def node_bound(self) -> bool:
        """Whether the refusal is about the nodes the pod may go to (another node may take it), not the pod."""
        return self.reason == UNSCHEDULABLE

    def __str__(self) -> str:
        message = " ".join(self.message.split())
        if len(message) > _MESSAGE_LIMIT:
            message = message[: _MESSAGE_LIMIT - 1] + "…"
        return f"{self.reason}: {message}" if message else self.reason


def _conditions(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = body.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _read(condition: Mapping[str, Any], default_reason: str) -> Refusal:
    reason, message = condition.get("reason"), condition.get("message")
    return Refusal(
        reason if isinstance(reason, str) and reason else default_reason,
        message if isinstance(message, str) else "",
        parse_time(condition.get("lastTransitionTime")),
    )


def refusal(pod: Mapping[str, Any]) -> Refusal | None:
    """Why kube-scheduler has not bound the pod (its ``PodScheduled`` condition is False), or None: bound, not
    tried yet, or only gated."""
    for condition in _conditions(pod):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            if condition.get("reason") == SCHEDULING_GATED:
                return None
            return _read(condition, "NotScheduled")
    return None


def group_refusal(group: Mapping[str, Any]) -> Refusal | None:
    """Why kube-scheduler has not scheduled the PodGroup (its scheduled condition is False), or None."""
    for condition in _conditions(group):
        if condition.get("type") in GROUP_CONDITIONS and condition.get("status") == "False":
            return _read(condition, "NotScheduled")
    return None


def give_up_at(refused: Refusal | None, steered_at: datetime | None, timeout: float) -> datetime | None:
    """When a pod steered at ``steered_at`` that kube-scheduler refuses to bind is given up: ``timeout`` seconds
    after the refusal, counted from the steering when that came later (a pod made gated reads ``PodScheduled``
    False since it was made, and kube-scheduler keeps that time when the reason changes). None: not refused."""
    if refused is None:
        return None
    starts = [t for t in (refused.since, steered_at) if t is not None]
    if not starts:
        return None
    return max(starts) + timedelta(seconds=timeout)
