"""What one pass wants done for one gang gputopo does not own, in the order the writer does it.

The record (the gang's ``GangPlacement``) goes first: a pod is steered only after the plan it belongs to is
recorded, so an operator that dies between the two finds the plan on restart and steers the rest into it instead
of planning the gang again (and giving its GPUs to another). Then the evictions, then (in DRA mode) the allocations of
the pods' ResourceClaims, then the pods' patches, then the Events: a pod is let go only once its claims hold its
planned devices, so kube-scheduler has nothing left to choose.

A record whose gang has no owner and no pod left is deleted once kept long enough (``RecordDeletion``); such a gang
has nothing else to do, so the deletion is all its actions then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gputopo.control.actions import EventNote
from gputopo.control.facts import JobKey

__all__ = ["ClaimAllocation", "Eviction", "GangActions", "Involved", "PodPatch", "RecordDeletion"]


@dataclass(frozen=True, slots=True)
class PodPatch:
    """A JSON patch (RFC 6902) for one pod; ``uid`` guards against a pod deleted and created again meanwhile."""

    name: str
    uid: str
    ops: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The allocation to write into one pod's ResourceClaim (``status.allocation``) before the pod is let go.

    ``uid`` guards against a claim deleted and made again meanwhile. ``finalizers``: the claim's finalizers as
    read, when it lacks kube-scheduler's ``resource.kubernetes.io/delete-protection`` (added first, as
    kube-scheduler adds it before it allocates). ``replace``: the claim holds an allocation of an earlier plan,
    reserved for nobody, which is cleared first. ``pod`` is the pod the claim is for: its patch waits for this write."""

    name: str
    uid: str
    pod: str
    allocation: dict[str, Any]
    finalizers: tuple[str, ...] | None = None
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Eviction:
    """One pod evicted through the Eviction API (its PodDisruptionBudgets honoured), with the owner's grace
    period (None: the pod's own)."""

    name: str
    uid: str
    grace_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class RecordDeletion:
    """The gang's record deleted on the condition that it is still the object read: the same ``uid`` (not a record
    of the same name made since) and, when known, the same ``resource_version`` (not written since)."""

    uid: str
    resource_version: str = ""


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
    claims: list[ClaimAllocation] = field(default_factory=list)  # written before ``patches``
    patches: list[PodPatch] = field(default_factory=list)
    events: list[tuple[Involved, EventNote]] = field(default_factory=list)
    placed: bool = False  # these actions carry a new plan
    deletion: RecordDeletion | None = None  # the record deleted (nothing else is done then)

    def __bool__(self) -> bool:
        return bool(
            self.record
            or self.status is not None
            or self.evictions
            or self.claims
            or self.patches
            or self.events
            or self.deletion is not None
        )

    @property
    def reports_only(self) -> bool:
        """Whether these actions only record and report (the record, its status, Events): no pod changes by them."""
        return not (self.evictions or self.claims or self.patches)

    def event(self, about: Involved, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append((about, EventNote(type_, reason, message)))
