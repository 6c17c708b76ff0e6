"""What the operator remembers about each job between passes, and the decisions made from it (pure).

One ``JobMemory`` per job: the generation last indexed, the nodes to avoid and until when, the API server's
refusal of its pods, its failed applies in a row, the pods and the Kueue Workload created that the watch does
not show yet, since when its report is held back, and its node turn. ``Memory`` keeps them and decides from
them: which jobs a pass leaves alone, which reports wait for the gangs' writes, how long to back off. Nothing
here reads a clock: the pass's ``now`` and the runtime's monotonic ``tick`` come in as arguments.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from gputopo.control.actions import JobActions
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.reconcile import shown_generation

__all__ = [
    "REFUSED",
    "REPORT_DELAY_SECONDS",
    "SHOWN_WITHIN_SECONDS",
    "Avoidance",
    "Binding",
    "JobMemory",
    "Memory",
    "Refusal",
    "Release",
    "Unseen",
    "WorkloadSent",
    "Written",
    "refuses",
    "retry_delay",
]

# A create the API server answers with one of these will fail again the same way: the spec is at fault
# (422 Invalid: validation; 400 BadRequest: a field of the wrong type). 403 is not one: quota exceeded or a
# service account not created yet pass, so it backs off and retries like any other failure.
REFUSED = frozenset({400, 422})
# A job whose pods were created stays busy until the watch shows them so, or this long at most.
SHOWN_WITHIN_SECONDS = 10.0
# While gangs' writes go out, a job's report (a status, Events, nothing else) waits for them this long at
# most; a later pass reports whatever is true then, in one write instead of several.
REPORT_DELAY_SECONDS = 5.0


def refuses(status: int) -> bool:
    """Whether an API answer to a create says the spec is at fault (retrying the same spec fails again)."""
    return status in REFUSED


def retry_delay(failures: int) -> float:
    """Seconds before retrying a job whose apply failed ``failures`` times in a row: 0.5 s doubling to 30 s."""
    return float(min(30.0, 0.5 * 2 ** (failures - 1)))


class Release(Protocol):
    """A node turn as the memory sees it: something to let go."""

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Avoidance:
    nodes: frozenset[str]
    until: datetime


@dataclass(frozen=True, slots=True)
class Refusal:
    generation: int  # the API server refused this generation's pods: until the spec changes
    message: str  # in its words


@dataclass(frozen=True, slots=True)
class Unseen:
    generation: int  # pods of this placement generation were created; the watch does not show them yet
    until: float  # when to stop waiting for them (monotonic)


@dataclass(frozen=True, slots=True)
class WorkloadSent:
    """A create of the job's Kueue Workload went out; until the watch shows it, a step asks for it again."""

    name: str
    until: float  # when to stop taking the watch's word for lagging (monotonic): create it again after that


@dataclass(frozen=True, slots=True)
class Binding:
    """devicePlugin mode: a gang holds ``turn`` on its nodes until the watch shows ``pods`` bound."""

    turn: Release
    generation: int
    pods: frozenset[str]


@dataclass(frozen=True, slots=True)
class Written:
    """What became of one job's writes."""

    shown: int | None = None  # the placement generation whose pods were created
    refusal: str | None = None  # the API server refused the gang's pods, in its words
    error: str | None = None  # an API call failed (its reason): retry
    status_failed: bool = False  # the status write itself failed


@dataclass(frozen=True, slots=True)
class JobMemory:
    generation: int | None = None  # as last indexed (any namespace)
    avoid: Avoidance | None = None
    refusal: Refusal | None = None
    failures: int = 0
    unseen: Unseen | None = None
    report_held_since: float | None = None
    binding: Binding | None = None
    workload_sent: WorkloadSent | None = None

    def busy(self, job: JobFacts, pods: Sequence[PodFacts], writing: bool, tick: float) -> bool:
        """Whether a pass must leave the job alone: its writes are in flight, or the pods they created are not
        shown yet (a step would create them again)."""
        return writing or (self.unseen is not None and not self._seen(job, pods, tick))

    def _seen(self, job: JobFacts | None, pods: Sequence[PodFacts], tick: float) -> bool:
        """Whether the unseen pods are done waiting for: shown, past their time, or their job gone."""
        unseen = self.unseen
        return unseen is None or job is None or tick >= unseen.until or _shown(job, pods, unseen.generation)

    def prune(
        self, job: JobFacts | None, pods: Sequence[PodFacts], indexed: bool, now: datetime, tick: float
    ) -> JobMemory | None:
        """The memory without what has lapsed; None when nothing is left. ``job`` is None for a job the
        operator does not watch (or gone), ``indexed`` whether the index still holds it at all."""
        kept = JobMemory(
            generation=self.generation if indexed else None,
            avoid=self.avoid if job is not None and self.avoid is not None and self.avoid.until > now else None,
            refusal=self.refusal
            if job is not None and self.refusal is not None and self.refusal.generation == job.generation
            else None,
            failures=self.failures if job is not None else 0,
            unseen=None if self._seen(job, pods, tick) else self.unseen,
            report_held_since=self.report_held_since,
            binding=self.binding,
            workload_sent=self.workload_sent
            if job is not None and self.workload_sent is not None and tick < self.workload_sent.until
            else None,
        )
        return None if kept == _EMPTY else kept


_EMPTY = JobMemory()


def _shown(job: JobFacts, pods: Sequence[PodFacts], generation: int) -> bool:
    """Whether the watch shows every pod of ``generation`` (or a later one)."""
    shown = shown_generation(job, pods)
    return shown is not None and shown >= generation


class Memory:
    """Every job's memory, and the decisions made from it."""

    __slots__ = ("_jobs",)

    def __init__(self) -> None:
        self._jobs: dict[JobKey, JobMemory] = {}

    def __getitem__(self, key: JobKey) -> JobMemory:
        return self._jobs.get(key, _EMPTY)

    def _set(self, key: JobKey, memory: JobMemory) -> None:
        if memory == _EMPTY:
            self._jobs.pop(key, None)
        else:
            self._jobs[key] = memory

    def _change(self, key: JobKey, **fields: object) -> None:
        self._set(key, replace(self[key], **fields))  # type: ignore[arg-type]

    # -- what the watches show ---------------------------------------------------------------------------------

    def indexed(self, job: JobFacts) -> bool:
        """A TrainingJob event: whether the job is new or its spec changed (news that can change a plan)."""
        urgent = self[job.key].generation != job.generation
        self._change(job.key, generation=job.generation)
        return urgent

    def pod_bound(self, pod: PodFacts) -> Release | None:
        """A pod of a gputopo job seen: the turn to give up when it was the last of its gang not seen bound."""
        if pod.job is None or not pod.node:
            return None
        key = JobKey((pod.namespace, pod.job))
        binding = self[key].binding
        if binding is None or pod.generation != binding.generation:
            return None
        left = binding.pods - {pod.name}
        if left:
            self._change(key, binding=replace(binding, pods=left))
            return None
        self._change(key, binding=None)
        return binding.turn

    def turn_given_up(self, key: JobKey, turn: Release) -> None:
        binding = self[key].binding
        if binding is not None and binding.turn is turn:
            self._change(key, binding=None)

    def bindings(self) -> list[tuple[JobKey, Release]]:
        return [(key, m.binding.turn) for key, m in self._jobs.items() if m.binding is not None]

    # -- before a pass -----------------------------------------------------------------------------------------

    def before_pass(
        self,
        jobs: Mapping[JobKey, JobFacts],
        job_pods: Mapping[JobKey, Sequence[PodFacts]],
        indexed: Collection[JobKey],
        writing: Collection[JobKey],
        now: datetime,
        tick: float,
    ) -> set[JobKey]:
        """The jobs a pass must not step (see ``JobMemory.busy``); then what has lapsed is forgotten. ``jobs`` are
        the jobs the operator watches, ``indexed`` every job indexed, ``writing`` those whose writes go out."""
        keys = {key for key in writing if key in jobs} | {k for k, m in self._jobs.items() if m.unseen is not None}
        busy = {k for k in keys if k in jobs and self[k].busy(jobs[k], job_pods.get(k, ()), k in writing, tick)}
        for key, memory in list(self._jobs.items()):
            kept = memory.prune(jobs.get(key), job_pods.get(key, ()), key in indexed, now, tick)
            self._set(key, kept or _EMPTY)
        return busy

    def avoided(self) -> dict[JobKey, frozenset[str]]:
        return {key: m.avoid.nodes for key, m in self._jobs.items() if m.avoid is not None}

    def refusals(self) -> dict[JobKey, str]:
        return {key: m.refusal.message for key, m in self._jobs.items() if m.refusal is not None}

    # -- after a pass ------------------------------------------------------------------------------------------

    def avoid(self, nodes: Mapping[JobKey, frozenset[str]], now: datetime, hold: timedelta) -> None:
        """Nodes a pass found a job's gang could not go to: avoided (with those noted before) for ``hold``."""
        for key, found in nodes.items():
            before = self[key].avoid
            self._change(key, avoid=Avoidance((before.nodes if before else frozenset()) | found, now + hold))

    def hold_reports(
        self, actions: Iterable[JobActions], placing: bool, writing: Collection[JobKey], tick: float
    ) -> tuple[list[JobActions], float | None]:
        """The actions to start now, and in how many seconds the oldest report held back is due (None: none).

        While gangs' writes go out (``placing``), a job that only has something to report waits, up to
        ``REPORT_DELAY_SECONDS``: the API server's time goes to the gangs, and a job that turned Running meanwhile
        and then had its GPUs reported costs one status write instead of two. A job that has just entered a Kueue
        queue has its Workload created at once and its report held the same way: when Kueue admits it meanwhile,
        the status that says so is its first. A Workload create that went out is not repeated while the watch
        does not show it yet (``WorkloadSent``)."""
        start = []
        acting = set()
        for job in (self._unsent(a, tick) for a in actions):
            if not job:
                continue
            acting.add(job.job)
            workload = job.new_workload_only() if placing else None
            if placing and (job.reports_only or workload is not None):
                since = self[job.job].report_held_since
                if since is None:
                    since = tick
                    self._change(job.job, report_held_since=tick)
                if tick - since < REPORT_DELAY_SECONDS:
                    if workload is not None:
                        start.append(workload)
                    continue
            self._change(job.job, report_held_since=None)
            start.append(job)
        for key, memory in list(self._jobs.items()):
            if memory.report_held_since is not None and key not in acting and key not in writing:
                self._change(key, report_held_since=None)  # nothing to report any more (or the job is gone)
        for job in start:
            if job.workload is not None:
                name = str(job.workload["metadata"]["name"])
                self._change(job.job, workload_sent=WorkloadSent(name, tick + SHOWN_WITHIN_SECONDS))
        held = self.reports_held()
        return start, (min(held.values()) + REPORT_DELAY_SECONDS - tick if held else None)

    def _unsent(self, actions: JobActions, tick: float) -> JobActions:
        """The actions without a Workload create that went out already and the watch does not show yet (a second
        create would only be refused as a conflict, one write more for the API server)."""
        sent = self[actions.job].workload_sent
        if actions.workload is None or sent is None or tick >= sent.until:
            return actions
        if sent.name != str(actions.workload["metadata"]["name"]):
            return actions
        return replace(actions, workload=None)

    def reports_held(self) -> dict[JobKey, float]:
        return {k: m.report_held_since for k, m in self._jobs.items() if m.report_held_since is not None}

    # -- after a job's writes ----------------------------------------------------------------------------------

    def written(self, key: JobKey, generation: int, outcome: Written, tick: float) -> float | None:
        """Remember what a job's writes came to; the seconds to wait before retrying them, if they failed."""
        if outcome.shown is not None:
            self._change(key, unseen=Unseen(outcome.shown, tick + SHOWN_WITHIN_SECONDS))
        if outcome.refusal is not None:
            self._change(key, refusal=Refusal(generation, outcome.refusal))
        if outcome.error is None:
            self._change(key, failures=0)
            return None
        failures = self[key].failures + 1
        self._change(key, failures=failures, workload_sent=None)  # the retry makes the Workload if it is missing
        return retry_delay(failures)

    def binds(self, key: JobKey, turn: Release, generation: int, pods: Collection[str]) -> None:
        """A gang's pods went out: it holds ``turn`` until the watch shows them bound."""
        self._change(key, binding=Binding(turn, generation, frozenset(pods)))

    @staticmethod
    def frees_plan(outcome: Written, placed: bool) -> bool:
        """Whether the ledger lets the job's plan go: its pods were refused (their GPUs are free again), or the
        status of a gang just ``placed`` was never written (nothing records the plan)."""
        return outcome.refusal is not None or (placed and outcome.status_failed)
