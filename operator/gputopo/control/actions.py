"""What one control-loop pass wants done to the cluster, per job, in the order the client does it.

The status goes first: a pod is created only after the placement it belongs to is recorded, so an
operator that dies between the two finds the plan on restart and finishes it instead of re-planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.facts import JobKey

__all__ = ["EventNote", "JobActions", "PodDeletion", "WorkloadPatch"]


@dataclass(frozen=True, slots=True)
class EventNote:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PodDeletion:
    name: str
    grace_seconds: int


@dataclass(frozen=True, slots=True)
class WorkloadPatch:
    """A merge patch of a Kueue Workload's status that carries the resourceVersion it was worked out from."""

    name: str
    body: dict[str, Any]


@dataclass
class JobActions:
    job: JobKey
    uid: str
    status: TrainingJobStatus | None = None  # write when set (the whole status)
    deletions: list[PodDeletion] = field(default_factory=list)
    service: dict[str, Any] | None = None  # create if absent
    claims: list[dict[str, Any]] = field(default_factory=list)  # ResourceClaims, created if absent before the pods
    claim_deletions: list[str] = field(default_factory=list)  # ResourceClaims of the job to delete
    pods: list[dict[str, Any]] = field(default_factory=list)  # create if absent
    events: list[EventNote] = field(default_factory=list)
    delete_job: bool = False
    # Kueue (``kueue_quota``): the job generation's Workload, created if absent; Workloads to delete; status patches.
    workload: dict[str, Any] | None = None
    workload_deletions: list[str] = field(default_factory=list)
    workload_patches: list[WorkloadPatch] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.status is not None
            or self.deletions
            or self.service
            or self.claims
            or self.claim_deletions
            or self.pods
            or self.events
            or self.delete_job
            or self.workload is not None
            or self.workload_deletions
            or self.workload_patches
        )

    @property
    def reports_only(self) -> bool:
        """Whether these actions only report (a status, Events): nothing in the cluster changes by them."""
        return not (
            self.deletions
            or self.service
            or self.claims
            or self.claim_deletions
            or self.pods
            or self.delete_job
            or self.workload is not None
            or self.workload_deletions
            or self.workload_patches
        )

    def new_workload_only(self) -> JobActions | None:
        """These actions' Workload to create, alone, when they are that and a report (a status, Events) and
        nothing else: a job that has just entered a Kueue queue. Kueue admits from the Workload; the report only
        says that the job waits, and may wait itself. None otherwise."""
        if self.workload is None:
            return None
        rest = replace(self, workload=None, status=None, events=[])
        return JobActions(self.job, self.uid, workload=self.workload) if not rest else None

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(EventNote(type_, reason, message))
