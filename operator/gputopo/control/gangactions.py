"""What one pass wants done for one gang gputopo does not own, in the order the writer does it.

The record (the gang's ``GangPlacement``) goes first: a pod is steered only after the plan it belongs to is
recorded, so an operator that dies between the two finds the plan on restart and steers the rest into it instead
of planning the gang again (and giving its GPUs to another). Then the evictions, then the pods' patches, then the
Events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gputopo.control.actions import EventNote
from gputopo.control.facts import JobKey

__all__ = ["Eviction", "GangActions", "Involved", "PodPatch"]


@dataclass(frozen=True, slots=True)
class PodPatch:
    """A JSON patch (RFC 6902) for one pod; ``uid`` guards against a pod deleted and created again meanwhile."""

    name: str
    uid: str
    ops: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Eviction:
    """One pod evicted through the Eviction API (its PodDisruptionBudgets honoured), with the owner's grace
    period (None: the pod's own)."""

    name: str
    uid: str
    grace_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Involved:
    """The object an Event is about: the gang's owner, or the pod of a gang of bare pods."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass
class GangActions:
    key: JobKey
    namespace: str
    record_name: str  # the GangPlacement's name
    record: dict[str, Any] | None = None  # the GangPlacement to create when absent (metadata and spec)
    status: dict[str, Any] | None = None  # its whole status, written when set
    evictions: list[Eviction] = field(default_factory=list)
    patches: list[PodPatch] = field(default_factory=list)
    events: list[tuple[Involved, EventNote]] = field(default_factory=list)
    placed: bool = False  # these actions carry a new plan

    def __bool__(self) -> bool:
        return bool(self.record or self.status is not None or self.evictions or self.patches or self.events)

    def event(self, about: Involved, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append((about, EventNote(type_, reason, message)))
