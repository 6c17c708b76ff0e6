"""GPUs the operator has planned but cannot yet see in the cluster, so two plans never share a GPU.

A plan becomes visible in two steps: the job's status (with the placement) and then its pods (with the
planned GPUs in an annotation). Until both have come back through the watches, the ledger holds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from gputopo.control.facts import JobKey

__all__ = ["Ledger", "PlannedGang"]


@dataclass(frozen=True, slots=True)
class PlannedGang:
    """One placement generation of one job: per worker, its node and GPU indices."""

    job: JobKey
    generation: int
    workers: tuple[tuple[str, tuple[int, ...]], ...]
    planned_at: datetime | None = None

    def gpus_on(self, node: str) -> frozenset[int]:
        return frozenset(g for n, gpus in self.workers if n == node for g in gpus)


class Ledger:
    """Plans in flight, newest generation per job."""

    __slots__ = ("_plans",)

    def __init__(self) -> None:
        self._plans: dict[JobKey, PlannedGang] = {}

    def __len__(self) -> int:
        return len(self._plans)

    def __iter__(self) -> Iterator[PlannedGang]:
        return iter(list(self._plans.values()))

    def __contains__(self, job: object) -> bool:
        return job in self._plans

    def get(self, job: JobKey) -> PlannedGang | None:
        return self._plans.get(job)

    def reserve(self, plan: PlannedGang) -> None:
        """Hold a plan; a newer generation of the same job replaces the older one."""
        old = self._plans.get(plan.job)
        if old is None or plan.generation >= old.generation:
            self._plans[plan.job] = plan

    def release(self, job: JobKey) -> None:
        self._plans.pop(job, None)

    def prune(self, visible: Mapping[JobKey, int | None]) -> list[JobKey]:
        """Drop plans the cluster now shows: ``visible[job]`` is the generation whose whole gang of pods
        (and status) has been seen, or None while it has not; a job missing from ``visible`` is gone."""
        dropped = []
        for job, plan in list(self._plans.items()):
            if job not in visible:
                dropped.append(job)
            else:
                seen = visible[job]
                if seen is not None and seen >= plan.generation:
                    dropped.append(job)
        for job in dropped:
            del self._plans[job]
        return dropped
