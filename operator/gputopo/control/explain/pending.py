"""Whether a TrainingJob or a gang waits, and why, from its status alone: what ``status``, the map and the
operator's ``gputopo_pending_gangs`` gauge count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gputopo.api.conditions import PLACED
from gputopo.control.explain.reasons import PendingReason, gang_reason, job_reason
from gputopo.control.facts import JobFacts
from gputopo.control.gangrecords import GangRecord

__all__ = ["gang_waits", "job_waits", "pending_by_reason"]

_ACTIVE = ("Placing", "Running", "Rescheduling")


def job_waits(job: JobFacts) -> tuple[PendingReason, str] | None:
    """The job's pending reason and the operator's message; None for a job that runs, ended, or does not wait."""
    status = job.status
    if status.phase.value in ("Succeeded", "Failed"):
        return None
    if status.phase.value in _ACTIVE and status.placement is not None and status.placement.workers:
        return None
    if job.spec is None:
        return PendingReason.MISCONFIGURED, job.spec_error
    placed = next((c for c in status.conditions if c.type == PLACED), None)
    if placed is None:
        return PendingReason.TOPOLOGY_PLACEMENT_FAILED, "the operator has not answered yet"
    said = job_reason(placed.reason)
    return (said, placed.message) if said is not None else None


def gang_waits(gang: GangRecord) -> tuple[PendingReason, str] | None:
    """The gang's pending reason and message; None for a gang that holds a plan or does not wait."""
    said = gang_reason(gang.phase, gang.message)
    if said in (None, PendingReason.WAITING_FOR_PODS, PendingReason.PLACED_BY_KUEUE):
        return None
    if gang.ranks and said is not PendingReason.WAITING_FOR_RANKS:
        return None
    assert said is not None
    return said, gang.message


def pending_by_reason(jobs: Iterable[JobFacts], gangs: Iterable[GangRecord]) -> Counter[str]:
    found = [job_waits(j) for j in jobs] + [gang_waits(g) for g in gangs]
    return Counter(str(w[0]) for w in found if w is not None)
