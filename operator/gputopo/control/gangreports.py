"""While new plans' writes go out, a foreign gang that only has something to report waits (pure).

A gang's report (its record's status, its Events: no pod, claim or eviction changes by it) says what is true; it
steers nothing kube-scheduler waits for. Under a burst of placements each report is one more write the API server
takes while the gangs still to be placed wait for theirs (their record, their pods' patches), so a gang that turned
Running waits, as a TrainingJob's report does (``Memory.hold_reports``), up to ``REPORT_DELAY_SECONDS``; the pass
that starts it reports what is true then. A new plan's writes (its pods may come later: it only records) and a
record's deletion are never held. The plans the ledger holds come from the pass's steps, not from the records
written, so a report held holds no GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions
from gputopo.control.memory import REPORT_DELAY_SECONDS

__all__ = ["HeldReports"]


def _report(actions: GangActions) -> bool:
    return actions.reports_only and not actions.placed and actions.deletion is None


@dataclass
class HeldReports:
    """Since when (monotonic) each gang's report has been held back."""

    since: dict[JobKey, float] = field(default_factory=dict)

    def sort(
        self, actions: Iterable[GangActions], placing: bool, tick: float
    ) -> tuple[list[GangActions], float | None]:
        """The actions to start now, and in how many seconds the oldest report held back is due (None: none).
        ``placing``: new plans' writes are going out."""
        start: list[GangActions] = []
        acting: set[JobKey] = set()
        for gang in actions:
            acting.add(gang.key)
            if placing and _report(gang):
                since = self.since.setdefault(gang.key, tick)
                if tick - since < REPORT_DELAY_SECONDS:
                    continue
            self.since.pop(gang.key, None)
            start.append(gang)
        for key in [k for k in self.since if k not in acting]:
            del self.since[key]  # nothing to report any more (or the gang is gone)
        due = min(self.since.values()) + REPORT_DELAY_SECONDS - tick if self.since else None
        return start, due
