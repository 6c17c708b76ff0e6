"""The foreign gangs' part of a pass (pure): each gang stepped, those that want a plan queued beside the
TrainingJobs (one queue, one snapshot: a gang's plan and a job's never share a GPU), and the answers applied. A
record whose gang has no pod left is let go, and deleted in time when the gang has no owner (``gangretention``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gputopo.api.fields import failure
from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions
from gputopo.control.gangrecords import GangRecord, planned_from_records
from gputopo.control.gangretention import DEFAULT_RETENTION_SECONDS, gone
from gputopo.control.gangstep import GangStep, settle, step
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.phantoms import phantom_wait
from gputopo.control.queue import QueuedJob
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang
from gputopo.placement.shapes import Shape
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable

__all__ = ["GangInput", "GangPass", "GangPlanner"]

logger = logging.getLogger("gputopo.control")

# Plans one gang (its ``declared.gpu_ranks``) on a snapshot.
GangPlanner = Callable[[Snapshot, Gang], Placement | Unplaceable]


@dataclass(frozen=True, slots=True)
class GangInput:
    """The foreign gangs as the watches show them: each gang read from its pods and owners, each record,
    each member's body by pod uid (the patches are built from them), and how the pass plans a gang.
    ``record_retention``: seconds the record of a gang with no owner is kept once no pod of it is left."""

    gangs: Mapping[JobKey, Gang]
    records: Mapping[JobKey, GangRecord]
    bodies: Mapping[str, Mapping[str, Any]]
    planner: GangPlanner
    arrival_timeout: float = 300.0
    requester: Callable[[Gang], tuple[Shape, ...] | None] | None = None  # the gang's requests, to preempt for it
    record_retention: float = DEFAULT_RETENTION_SECONDS
    # Each namespace's room for more GPUs under its ResourceQuotas (absent: no quota on GPUs), and how many ranks
    # with no pod a gang of bare pods may be planned for where there is none (``phantoms``; None: no cap; the
    # operator passes its setting, 0 by default).
    quota_room: Mapping[str, int] = field(default_factory=dict)
    headroom: int | None = None


@dataclass
class GangPass:
    """One pass's gang steps and what came of them."""

    given: GangInput
    steps: dict[JobKey, GangStep] = field(default_factory=dict)
    plans: list[PlannedGang] = field(default_factory=list)
    tried: set[JobKey] = field(default_factory=set)  # gangs the queue answered this pass

    def step_all(
        self,
        view: ClusterView,
        config: Config,
        now: datetime,
        busy: Collection[JobKey],
        avoid: Mapping[JobKey, frozenset[str]],
    ) -> list[QueuedJob]:
        """Step every gang that is not busy; the queue entries of those that want ranks planned."""
        given, queued = self.given, []
        for key in sorted(given.gangs):
            if key in busy:
                continue
            gang = given.gangs[key]
            done = self._step(gang, given.records.get(key), view, config, now)
            if done is None:
                continue
            self.steps[key] = done
            if done.wants_placement:
                queued.append(self._queued(key, gang, done, avoid.get(key, frozenset()), now))
        for key, record in given.records.items():
            if key not in given.gangs and key not in busy:
                left = gone(key, record, now, given.record_retention)
                if left is not None:
                    self.steps[key] = left
        return queued

    def _step(
        self, gang: Gang, record: GangRecord | None, view: ClusterView, config: Config, now: datetime
    ) -> GangStep | None:
        """The gang's step; a gang whose step trips a bug is refused instead, naming what failed (None, and the
        gang left alone this pass, should even that fail): one gang never stops the pass for the others."""
        given = self.given
        try:
            wait = phantom_wait(gang, given.quota_room, given.headroom)
            return step(gang, record, given.bodies, view, config, now, given.arrival_timeout, wait)
        except Exception as error:
            logger.debug("stepping gang %s failed", gang.id, exc_info=True)
            why = f"gputopo could not decide for the gang: {failure(error)}"
            refused = replace(gang, problems=(*gang.problems, why))
        try:
            return step(refused, record, given.bodies, view, config, now, given.arrival_timeout)
        except Exception:
            logger.debug("refusing gang %s failed", gang.id, exc_info=True)
            return None

    def _queued(self, key: JobKey, gang: Gang, done: GangStep, avoid: frozenset[str], now: datetime) -> QueuedJob:
        declared = gang.declared
        assert declared is not None
        wanted = set(done.wants_ranks)
        shape = tuple(g if r in wanted else 0 for r, g in enumerate(declared.shape))
        part = replace(gang, declared=replace(declared, shape=shape))
        widest = max(shape, default=0)
        created = [m.created for m in gang.members if m.created is not None]
        planner = self.given.planner
        return QueuedJob(
            key,
            gang.priority,
            min(created) if created else now,
            Request(workers=len(wanted), gpus_per_worker=widest, name=str(gang.id)),
            avoid | done.avoid_nodes,
            planner=lambda snapshot: planner(snapshot, part),
            uid=gang.owner.uid if gang.owner is not None else min((m.uid for m in gang.members), default=""),
        )

    def held(self) -> list[PlannedGang]:
        """The plans the gangs' records hold after this pass's steps (a plan a step let go is not held)."""
        records = [s.record for s in self.steps.values()]
        records += [r for k, r in self.given.records.items() if k not in self.steps]
        return planned_from_records(records)

    def settled(self, key: JobKey, result: Placement | Unplaceable, now: datetime) -> None:
        self.tried.add(key)
        done = self.steps[key]
        plan = settle(self.given.gangs[key], done, result, self.given.bodies, now)
        if plan is not None:
            self.plans.append(plan)

    def visible(self) -> dict[JobKey, int | None]:
        """For the ledger: the plan generation each gang's record shows (its plan is held from the record)."""
        keys = set(self.given.gangs) | set(self.given.records)
        return {k: (self.given.records[k].generation if k in self.given.records else None) for k in keys}

    def actions(self) -> list[GangActions]:
        """Each gang's actions; but a gang the queue did not reach (the pass stopped early) that would only record
        and report writes nothing: the next pass, right after, steps it afresh and plans it. Its writes would keep
        it busy, out of that pass, for as long as the API server takes."""
        return [
            s.actions
            for key, s in self.steps.items()
            if s.actions and not (s.wants_placement and key not in self.tried and s.actions.reports_only)
        ]
