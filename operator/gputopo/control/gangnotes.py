"""Where a gang's sources disagree, in its status: the record's message names the disagreement after what the phase
says, and a Warning Event tells it once, when it is new.

A pod that a PodGroup and a Kueue pod group both name, a JobSet's pod with a LeaderWorkerSet's labels, a TrainJob
whose ``PET_NNODES`` is not its JobSet's count: the reader takes one and notes the other (``Gang.disagreements``).
"""

from __future__ import annotations

from dataclasses import replace

from gputopo.control.gangrecords import GangRecord
from gputopo.gangs.model import Gang

__all__ = ["disagreement", "with_disagreements", "without_disagreements"]


def disagreement(gang: Gang) -> str:
    """What the gang's status says of its sources' disagreements; "" when they agree."""
    return "sources disagree: " + "; ".join(gang.disagreements) if gang.disagreements else ""


def with_disagreements(gang: Gang, before: GangRecord, record: GangRecord) -> tuple[GangRecord, str]:
    """``record`` with the disagreement said after its message, and the Event's message when ``before`` did not
    say it yet ("" otherwise)."""
    said = disagreement(gang)
    if not said:
        return record, ""
    news = "" if said in before.message else said
    if said in record.message:
        return record, news
    return replace(record, message=f"{record.message}; {said}" if record.message else said), news


def without_disagreements(gang: Gang, record: GangRecord) -> GangRecord:
    """``record`` as its phase alone says it, so that a phase change is announced apart from the disagreement."""
    said = disagreement(gang)
    if not said or said not in record.message:
        return record
    return replace(record, message=record.message.replace(f"; {said}", "").replace(said, ""))
