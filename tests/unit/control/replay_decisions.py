"""The runtime's decisions around a pass, twice: as the operator of f5ae149 made them with the parallel dicts of
its ``Runtime`` (a copy, kept only for the comparison in ``pass_replay``), and as ``control.memory`` makes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gputopo.control import reconcile
from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import Ledger, PlannedGang

SHOWN_WITHIN_SECONDS = 10.0
REPORT_DELAY_SECONDS = 5.0


# -- the runtime's decisions at f5ae149, as its parallel dicts kept them (controller/runtime.py) -------------------


def _old_retry_delay(failures: int) -> float:
    return float(min(30.0, 0.5 * 2 ** (failures - 1)))


def _old_shown_ungated(job_: JobFacts, pods: Sequence[PodFacts], generation: int) -> bool:
    shown = reconcile.shown_generation(job_, pods)
    if shown is None or shown < generation:
        return False
    return not any(getattr(p, "gated", False) for p in pods if p.generation == shown and p.owner_uid == job_.uid)


@dataclass(frozen=True)
class Before:
    """What the runtime knows before a pass."""

    jobs: Mapping[JobKey, JobFacts]
    job_pods: Mapping[JobKey, Sequence[PodFacts]]
    writing: set[JobKey]
    now: datetime
    clock: float


Given = tuple[set[JobKey], dict[JobKey, frozenset[str]], dict[JobKey, str]]  # busy, avoided, refused


class OldDecisions:
    def __init__(self) -> None:
        self.avoid: dict[JobKey, tuple[frozenset[str], datetime]] = {}
        self.refused: dict[JobKey, tuple[int, str]] = {}
        self.failures: dict[JobKey, int] = {}
        self.generations: dict[JobKey, int] = {}
        self.unseen: dict[JobKey, tuple[int, float]] = {}
        self.reports_held: dict[JobKey, float] = {}
        self.binding: dict[JobKey, tuple[object, int, set[str]]] = {}

    def indexed(self, job_: JobFacts) -> bool:
        urgent = self.generations.get(job_.key) != job_.generation
        self.generations[job_.key] = job_.generation
        return urgent

    def pod_bound(self, pod: PodFacts) -> object | None:
        if pod.job is None or not pod.node:
            return None
        key = JobKey((pod.namespace, pod.job))
        held = self.binding.get(key)
        if held is None or pod.generation != held[1]:
            return None
        held[2].discard(pod.name)
        if not held[2]:
            del self.binding[key]
            return held[0]
        return None

    def before_pass(self, b: Before) -> Given:
        jobs, job_pods, writing, now, clock = b.jobs, b.job_pods, b.writing, b.now, b.clock
        busy = {key for key in writing if key in jobs}
        for key, (generation, until) in list(self.unseen.items()):
            job_ = jobs.get(key)
            if job_ is None or clock >= until or _old_shown_ungated(job_, job_pods.get(key, ()), generation):
                del self.unseen[key]
            else:
                busy.add(key)
        for key in [k for k, (_, until) in self.avoid.items() if until <= now or k not in jobs]:
            del self.avoid[key]
        for key in [k for k, (gen, _) in self.refused.items() if k not in jobs or jobs[k].generation != gen]:
            del self.refused[key]
        for key in [k for k in self.failures if k not in jobs]:
            del self.failures[key]
        for key in [k for k in self.generations if k not in jobs]:
            del self.generations[key]
        avoid = {k: nodes for k, (nodes, _) in self.avoid.items()}
        return busy, avoid, {key: message for key, (_, message) in self.refused.items()}

    def after_pass(self, found: Mapping[JobKey, frozenset[str]], now: datetime, hold: timedelta) -> None:
        for key, nodes in found.items():
            old = self.avoid.get(key, (frozenset(), now))[0]
            self.avoid[key] = (old | nodes, now + hold)

    def hold_reports(
        self, actions: Sequence[JobActions], placing: bool, writing: set[JobKey], clock: float
    ) -> tuple[list[JobActions], float | None]:
        start = []
        acting = set()
        for a in actions:
            acting.add(a.job)
            if a.reports_only and placing:
                since = self.reports_held.setdefault(a.job, clock)
                if clock - since < REPORT_DELAY_SECONDS:
                    continue
            self.reports_held.pop(a.job, None)
            start.append(a)
        for key in [k for k in self.reports_held if k not in acting and k not in writing]:
            del self.reports_held[key]
        due = min(self.reports_held.values()) + REPORT_DELAY_SECONDS - clock if self.reports_held else None
        return start, due

    def written(
        self, a: JobActions, job_: JobFacts, plan: PlannedGang | None, outcome: str, ledger: Ledger, clock: float
    ) -> float | None:
        to_show = None
        if outcome == "status-error":
            if plan is not None:
                ledger.release(a.job)
            failed = True
        elif outcome == "refused":
            self.refused[a.job] = (job_.generation, "the API server refused the gang's pods: 422 Invalid")
            ledger.release(a.job)
            failed = False
        else:
            placement = (a.status or job_.status).placement
            if a.pods and placement is not None:
                to_show = placement.generation
            failed = outcome == "error"
        delay = None
        if failed:
            failures = self.failures[a.job] = self.failures.get(a.job, 0) + 1
            delay = _old_retry_delay(failures)
        else:
            self.failures.pop(a.job, None)
        if to_show is not None:
            self.unseen[a.job] = (to_show, clock + SHOWN_WITHIN_SECONDS)
        return delay

    def binds(self, key: JobKey, token: object, generation: int, names: set[str]) -> None:
        self.binding[key] = (token, generation, set(names))


class NewDecisions:
    """The same decisions by ``control.memory``."""

    def __init__(self) -> None:
        from gputopo.control.memory import Memory

        self.memory = Memory()

    def indexed(self, job_: JobFacts) -> bool:
        return self.memory.indexed(job_)

    def pod_bound(self, pod: PodFacts) -> object | None:
        return self.memory.pod_bound(pod)

    def before_pass(self, b: Before) -> Given:
        busy = self.memory.before_pass(b.jobs, b.job_pods, b.jobs.keys(), b.writing, b.now, b.clock)
        return busy, self.memory.avoided(), self.memory.refusals()

    def after_pass(self, found: Mapping[JobKey, frozenset[str]], now: datetime, hold: timedelta) -> None:
        self.memory.avoid(found, now, hold)

    def hold_reports(
        self, actions: Sequence[JobActions], placing: bool, writing: set[JobKey], clock: float
    ) -> tuple[list[JobActions], float | None]:
        return self.memory.hold_reports(actions, placing, writing, clock)

    def written(
        self, a: JobActions, job_: JobFacts, plan: PlannedGang | None, outcome: str, ledger: Ledger, clock: float
    ) -> float | None:
        from gputopo.control.memory import Memory, Written

        if outcome == "status-error":
            written = Written(error="Conflict", status_failed=True)
        elif outcome == "refused":
            written = Written(refusal="the API server refused the gang's pods: 422 Invalid")
        else:
            placement = (a.status or job_.status).placement
            shown = placement.generation if a.pods and placement is not None else None
            written = Written(shown=shown, error="Conflict" if outcome == "error" else None)
        if Memory.frees_plan(written, placed=plan is not None):
            ledger.release(a.job)
        return self.memory.written(a.job, job_.generation, written, clock)

    def binds(self, key: JobKey, token: object, generation: int, names: set[str]) -> None:
        from gputopo.control.memory import Release

        assert isinstance(token, Token)
        release: Release = token
        self.memory.binds(key, release, generation, names)


@dataclass
class Token:
    """A node turn as the decisions see it: released once."""

    name: str
    released: bool = False

    def release(self) -> None:
        self.released = True
