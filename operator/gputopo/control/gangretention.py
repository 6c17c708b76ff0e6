"""What becomes of a gang's record once no pod of the gang is left (pure).

Its plan is let go at once (``Released``). A gang with an owner keeps its record until the owner goes: the garbage
collector deletes the record with it (its ``ownerReferences``). A gang of bare pods (a Kueue pod group, pods
labelled ``gputopo.io/gang``) has no owner, so nothing else would ever delete its record: the operator stamps the
record with the time it found no pod left (``status.podsGoneAt``) and deletes it ``retention`` seconds after, so
people can still read what happened meanwhile. A pod of the gang arriving before then keeps the record (its step
clears the stamp, ``gangstep.step``). The time is read from the record, never from the operator's memory, so a
restarted operator deletes it when the one before would have. The deletion names the record's uid and
resourceVersion: a record made again under the same name, or written since it was read, is never deleted by it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions, RecordDeletion
from gputopo.control.gangrecords import GangRecord, status_of
from gputopo.control.gangstep import GangStep, Phase

__all__ = ["DEFAULT_RETENTION_SECONDS", "GONE_MESSAGE", "gone"]

DEFAULT_RETENTION_SECONDS = 600.0
GONE_MESSAGE = "no pod of the gang is left"


def gone(key: JobKey, record: GangRecord, now: datetime, retention: float) -> GangStep | None:
    """The step of a record whose gang has no pod left at ``now``; None when there is nothing to do (an owned
    gang's record whose plan is let go already). ``retention``: how long a record of a gang with no owner is kept
    after its last pod went; until then the step asks to look again when it is due."""
    released = record
    if record.ranks and record.phase != Phase.RELEASED:
        released = replace(record, ranks=(), phase=Phase.RELEASED, message=GONE_MESSAGE)
    actions = GangActions(key, key[0], record.name)
    if record.owned:
        if released is record:
            return None
        actions.status = status_of(released)
        return GangStep(actions, released)
    since = record.pods_gone_at or now
    stamped = replace(released, pods_gone_at=since)
    due = since + timedelta(seconds=retention)
    if now >= due and record.uid:  # only a record read back (its uid known) can be deleted exactly
        actions.deletion = RecordDeletion(record.uid, record.resource_version)
        return GangStep(actions, stamped)
    if status_of(stamped) != status_of(record):
        actions.status = status_of(stamped)
    return GangStep(actions, stamped, wake_at=due if now < due else None)
