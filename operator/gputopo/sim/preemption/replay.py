"""Replay a trace with priority classes against a cluster under one preemption policy.

Jobs wait in priority order (then by when they were queued); on every arrival, departure and start the queue
is tried again (jobs behind a blocked one may start: backfill). A job the engine cannot place may preempt
(``gputopo``: victims chosen by topology; ``priority-only``: lowest priority, then most recent, as Kueue does;
``none``: never): its victims end after their grace period, and the GPUs planned for it are held for it
meanwhile (its nomination), so nothing else takes them; it starts when they are free. A victim goes back to
the queue, in its priority's place, and resumes from its last checkpoint; what it ran since is lost. No clock
is read: time is the trace's. Under a preempting policy each job's wait is split: the time it would not have fit
even with every lower-priority gang ended (its own class or higher filled the cluster, and no preemption may
end them) and the rest, while lower-priority gangs stood in its way, which is what preemption answers for.

Two replays of one trace under different policies soon run different clusters (other victims, other jobs
waiting), so their totals mix the choice of victims with where the replay went. A ``shadow`` policy is asked
too at each preemption, on the same cluster, without acting on its answer: the work its victims would lose
there measures the choice of victims alone.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gputopo.placement.engine import place
from gputopo.placement.preemption.gangs import (
    Nomination,
    PreemptionRules,
    Preemptor,
    RunningGang,
    victim_allowance,
)
from gputopo.placement.preemption.victims import NoPreemption, PreemptionPlan, plan_preemption
from gputopo.placement.types import Placement, Request, Snapshot
from gputopo.sim.preemption.priority_only import preempt_by_priority
from gputopo.sim.preemption.trace import PriorityJob

# A report's figures by name: numbers, the shadow's name, the loss per preemptor class.
Figures = dict[str, float | int | str | dict[str, float] | dict[str, float | None] | None]

__all__ = ["PREEMPTION_POLICIES", "Preempt", "PreemptionReport", "PriorityOutcome", "SameState", "replay"]


class Preempt:
    """A preemption policy: ``(snapshot, preemptor, running, rules, nominations) -> plan | why not``."""

    def __init__(self, name: str, choose: Callable[..., PreemptionPlan | NoPreemption] | None) -> None:
        self.name = name
        self.choose = choose

    def __call__(
        self,
        snapshot: Snapshot,
        preemptor: Preemptor,
        running: Sequence[RunningGang],
        rules: PreemptionRules,
        nominations: Iterable[Nomination] = (),
    ) -> PreemptionPlan | NoPreemption:
        if self.choose is None:
            return NoPreemption("this policy never preempts")
        return self.choose(snapshot, preemptor, running, rules, nominations)


PREEMPTION_POLICIES: dict[str, Preempt] = {
    "gputopo": Preempt("gputopo", plan_preemption),
    "priority-only": Preempt("priority-only", preempt_by_priority),
    "none": Preempt("none", None),
}


@dataclass(frozen=True, slots=True)
class PriorityOutcome:
    job: str
    priority_class: str
    gpus: int
    wait: float  # from arrival to its first start
    busbw_gbps: float  # at its first start
    preempted: int = 0  # times it was preempted
    # Seconds of ``wait`` when it would not have fit even with every lower-priority gang ended: its own class
    # or higher filled the cluster, and no preemption may shorten that.
    behind_own_class: float = 0.0

    @property
    def wait_behind_lower(self) -> float:
        """The seconds it waited while lower-priority gangs stood in its way: what preemption answers for."""
        return max(0.0, self.wait - self.behind_own_class)


@dataclass(slots=True)
class PreemptionReport:
    policy: str
    outcomes: list[PriorityOutcome] = field(default_factory=list)
    never_placed: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    victim_gpu_seconds_lost: float = 0.0
    movable: int = 0  # victims the plan found room for at once elsewhere
    lost_by_preemptor_class: dict[str, float] = field(default_factory=dict)  # victim GPU-seconds, per class
    shadow: SameState | None = None

    def summary(self, high: str) -> Figures:
        """The figures of the class ``high``, the cost to everyone else, and the shadow's on the same states."""
        mine = [o for o in self.outcomes if o.priority_class == high]
        waits = sorted(o.wait for o in mine)
        behind_lower = sorted(o.wait_behind_lower for o in mine)
        comm = [o.busbw_gbps for o in mine if o.gpus > 1]
        return {
            "high_jobs_placed": len(mine),
            "high_jobs_never_placed": self.never_placed.get(high, 0),
            "high_wait_p50_s": _quantile(waits, 0.5),
            "high_wait_p99_s": _quantile(waits, 0.99),
            "high_wait_behind_lower_p99_s": _quantile(behind_lower, 0.99),
            "high_mean_busbw_GBps": statistics.fmean(comm) if comm else None,
            "preemptions": self.preemptions,
            "victims_movable": self.movable,
            "victim_gpu_hours_lost": self.victim_gpu_seconds_lost / 3600,
            "jobs_never_placed": sum(self.never_placed.values()),
            "mean_wait_s_all": statistics.fmean(o.wait for o in self.outcomes) if self.outcomes else 0.0,
            "wait_p50_s_by_class": {cls: _quantile(w, 0.5) for cls, w in sorted(self._waits().items())},
            "wait_p99_s_by_class": {cls: _quantile(w, 0.99) for cls, w in sorted(self._waits().items())},
            "victim_gpu_hours_lost_by_preemptor_class": {
                cls: seconds / 3600 for cls, seconds in sorted(self.lost_by_preemptor_class.items())
            },
            **(self.shadow.summary() if self.shadow is not None else {}),
        }

    def _waits(self) -> dict[str, list[float]]:
        """Each class's waits from arrival to first start, sorted."""
        out: dict[str, list[float]] = {}
        for o in self.outcomes:
            out.setdefault(o.priority_class, []).append(o.wait)
        return {cls: sorted(w) for cls, w in out.items()}


@dataclass(slots=True)
class SameState:
    """At each of the policy's preemptions, what the ``shadow`` policy would have done on the same cluster.

    ``lost`` and ``shadow_lost``: victim GPU-seconds of both, over the decisions where both preempt;
    ``shadow_refused``: decisions where the shadow finds no preemption (the policy's loss there is not counted).
    """

    shadow: str
    decisions: int = 0
    lost: float = 0.0
    shadow_lost: float = 0.0
    shadow_refused: int = 0

    def add(self, now: float, plan: PreemptionPlan, theirs: PreemptionPlan | NoPreemption) -> None:
        self.decisions += 1
        if not isinstance(theirs, PreemptionPlan) or not theirs.victims:
            self.shadow_refused += 1
            return
        self.lost += sum(v.work_lost(now) for v in plan.victims)
        self.shadow_lost += sum(v.work_lost(now) for v in theirs.victims)

    def summary(self) -> Figures:
        return {
            "same_state_shadow": self.shadow,
            "same_state_decisions": self.decisions,
            "same_state_shadow_refused": self.shadow_refused,
            "same_state_victim_gpu_hours_lost": self.lost / 3600,
            "same_state_shadow_victim_gpu_hours_lost": self.shadow_lost / 3600,
            "same_state_lost_ratio": self.lost / self.shadow_lost if self.shadow_lost else None,
        }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


@dataclass(slots=True)
class _Run:
    placement: Placement
    start: float
    progress0: float  # seconds of the job done before this run
    generation: int


_END, _START, _ARRIVE, _WAKE = 0, 1, 2, 3


def _request(job: PriorityJob) -> Request:
    j = job.job
    return Request(j.workers, j.gpus_per_worker, name=j.name, same_model=False, slice_size=j.slice_size)


def replay(
    snapshot: Snapshot,
    trace: Sequence[PriorityJob],
    policy: Preempt,
    *,
    protection_s: float = 600.0,
    max_victims_per_pass: int = 16,
    max_victims_per_gang: int = 64,
    preemptors_per_pass: int = 2,
    on_event: Callable[[int, int], None] | None = None,
    shadow: Preempt | None = None,
) -> PreemptionReport:
    """Replay ``trace`` under ``policy``; see the module's docstring."""
    report = PreemptionReport(policy.name, shadow=SameState(shadow.name) if shadow is not None else None)
    by_name = {job.name: i for i, job in enumerate(trace)}
    events: list[tuple[float, int, int, int]] = []  # (time, kind, job, generation)
    for i, job in enumerate(trace):
        heapq.heappush(events, (job.job.arrival, _ARRIVE, i, 0))
    queue: dict[int, float] = {}  # job -> when queued
    runs: dict[int, _Run] = {}
    starting: dict[int, tuple[Placement, float]] = {}  # nominated: GPUs held, starts after the victims' grace
    progress = [0.0] * len(trace)
    generation = [0] * len(trace)
    first: dict[int, PriorityOutcome] = {}
    preempted_at: dict[int, float] = {}
    preempted_by: dict[int, set[str]] = {}
    times_preempted = [0] * len(trace)
    behind = [0.0] * len(trace)  # before its first start, seconds its own class or higher filled the cluster
    behind_since: dict[int, float] = {}
    wakes: set[tuple[int, float]] = set()
    done, total = 0, len(events)

    def fits_without_lower(j: int) -> bool:
        """Whether job ``j`` would place with every gang of lower priority ended (nominations still held)."""
        priority, freed = trace[j].priority, snapshot
        lower = [run.placement for k, run in runs.items() if trace[k].priority < priority]
        if not lower:
            return False  # the engine just refused it on this very cluster
        for placement in lower:
            freed = freed.release(placement)
        return isinstance(place(freed, _request(trace[j])), Placement)

    def unblock(j: int, now: float) -> None:
        since = behind_since.pop(j, None)
        if since is not None:
            behind[j] += now - since

    def gang(i: int, now: float) -> RunningGang:
        job, run = trace[i], runs[i]
        interval = job.checkpoint_interval_s
        checkpoint = run.start + math.floor((now - run.start) / interval) * interval if interval else None
        return RunningGang(job.name, job.priority, run.placement, run.start, checkpoint, job.preemptible,
                           job.min_runtime_s, preempted_at.get(i), frozenset(preempted_by.get(i, ())),
                           interval)  # fmt: skip

    def start(i: int, placement: Placement, now: float) -> None:
        unblock(i, now)
        generation[i] += 1
        runs[i] = _Run(placement, now, progress[i], generation[i])
        heapq.heappush(events, (now + trace[i].job.duration - progress[i], _END, i, generation[i]))
        if i not in first:
            job = trace[i]
            first[i] = PriorityOutcome(job.name, job.priority_class, job.job.gpus, now - job.job.arrival,
                                       placement.busbw_gbps)  # fmt: skip

    while events:
        now, kind, i, gen = heapq.heappop(events)
        if kind == _END:
            if i not in runs or runs[i].generation != gen:
                continue  # a run that was preempted
            snapshot = snapshot.release(runs.pop(i).placement)
        elif kind == _START:
            placement, _ = starting.pop(i)
            start(i, placement, now)
        elif kind == _ARRIVE:
            queue[i] = now
        budget, preemptors = max_victims_per_pass, preemptors_per_pass
        running: list[RunningGang] | None = None
        for j in sorted(queue, key=lambda j: (-trace[j].priority, queue[j], j)):
            request = _request(trace[j])
            result = place(snapshot, request)
            if isinstance(result, Placement):
                del queue[j]
                snapshot = snapshot.reserve(result)
                start(j, result, now)
                running = None
                continue
            if policy.choose is not None and j not in first:
                if fits_without_lower(j):
                    unblock(j, now)
                else:
                    behind_since.setdefault(j, now)
            if policy.choose is None or budget <= 0 or preemptors <= 0:
                continue
            if running is None:
                running = [gang(k, now) for k in runs]
            job = trace[j]
            wanted = Preemptor(
                request, job.priority, job.policy, frozenset(preempted_by.get(j, ())), preempted_at.get(j),
                checkpoint_wait_s=job.checkpoint_wait_s, waiting_since=queue[j],
            )  # fmt: skip
            allowance = victim_allowance(max_victims_per_pass, budget, max_victims_per_gang)
            rules = PreemptionRules(now=now, protection_s=protection_s, max_victims=allowance)
            plan = policy(snapshot, wanted, running, rules)
            if not isinstance(plan, PreemptionPlan):
                if plan.retry_at is not None and (j, plan.retry_at) not in wakes:
                    wakes.add((j, plan.retry_at))  # asked again at its victims' checkpoint
                    heapq.heappush(events, (plan.retry_at, _WAKE, j, 0))
                continue
            if not plan.victims:  # a domain where it fits as it is, which the engine's own choice missed
                del queue[j]
                snapshot = snapshot.reserve(plan.placement)
                start(j, plan.placement, now)
                running = None
                continue
            preemptors -= 1
            if shadow is not None and report.shadow is not None:
                report.shadow.add(now, plan, shadow(snapshot, wanted, running, rules))
            grace = 0.0
            for victim in plan.victims:
                k = by_name[victim.name]
                report.victim_gpu_seconds_lost += victim.work_lost(now)
                cls = job.priority_class
                report.lost_by_preemptor_class[cls] = report.lost_by_preemptor_class.get(cls, 0.0) + victim.work_lost(
                    now
                )
                report.preemptions += 1
                times_preempted[k] += 1
                budget -= 1
                checkpoint = victim.checkpoint_time if victim.checkpoint_time is not None else victim.start_time
                progress[k] = runs[k].progress0 + (checkpoint - victim.start_time)
                snapshot = snapshot.release(runs.pop(k).placement)
                preempted_at[k] = now
                preempted_by.setdefault(k, set()).add(job.name)
                queue[k] = now
                grace = max(grace, trace[k].grace_period_s)
            del queue[j]
            unblock(j, now)
            snapshot = snapshot.reserve(plan.placement)
            starting[j] = (plan.placement, now + grace)
            heapq.heappush(events, (now + grace, _START, j, 0))
            # A victim that could move at once still goes back to the queue: starting it there and then would
            # put it ahead of higher-priority jobs waiting for the same GPUs.
            report.movable += len(plan.moves)
            running = None
        if kind == _WAKE:
            continue  # not one of the trace's events: the progress counts those
        done += 1
        if on_event is not None:
            on_event(done, total)
    report.outcomes = [
        PriorityOutcome(o.job, o.priority_class, o.gpus, o.wait, o.busbw_gbps, times_preempted[i], behind[i])
        for i, o in sorted(first.items())
    ]
    for j in queue:
        if j not in first:
            cls = trace[j].priority_class
            report.never_placed[cls] = report.never_placed.get(cls, 0) + 1
    return report
