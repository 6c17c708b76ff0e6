"""The preemption part of one pass (pure): what the steps of the pass hold, nominated, ended and decided.

Works on the pass's steps in place (the TrainingJobs' ``JobStep`` and the gangs' ``GangStep``), so what it changes
is written with the rest of each job's actions. See ``preemptions`` for the two steps of a preemption.

A preemptor told to wait for its victims' next checkpoint (its class's ``gputopo.io/checkpoint-wait-seconds``)
nominates nothing and touches no victim: it says so (``WaitingForCheckpoint``) and the pass asks to run again at
that checkpoint (``retry_at``, into the pass's ``wake_at``). Passes run every ``resync_seconds`` anyway (2 s by
default); the wake keeps the wait exact under a longer period.

A nomination read from a status names its victims and GPUs in an object a tenant may write (a TrainingJob's
``status.nomination``, a GangPlacement's). The pass carries out, and holds GPUs for, only a nomination this operator
decided for that preemptor with those very victims (``trusted``, kept in memory from the decision while the
nomination lives). Any other (written by someone else, or by the operator before it restarted) is cleared, ends
nobody and holds nothing; the preemptor is decided for again. A victim already ended is recorded as such in its own
status, and a foreign gang's pods left after a partial eviction go from that record, not from the nomination.

A TrainingJob preempts only once the API server said, by a dry run of one rank's pod, that it would admit the job's
pods (``admission``): the pass asks for the dry run (``checks``) and preempts nobody for the job until the answer
for the job as it is now is in ``admissions``; a refusal is said in the job's ``Placed`` condition. Without
``admissions`` (None) nothing is asked.

A gang may preempt only when its PriorityClass may, in its namespace (``PreemptionSettings.preemptors``); a gang of
bare pods (whose size only its own pods declare) only once every declared rank has a pod; a gang whose class
protects it (``gputopo.io/preemptible: "false"``) is never a victim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gputopo.api.conditions import INVALID, KUEUE_ADMITTED, PLACED, set_condition
from gputopo.api.preemption import NominationStatus, PreemptionStatus
from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.control.admission import AdmissionAnswer, AdmissionCheck, admission_check, admission_signature
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.gangpass import GangPass
from gputopo.control.gangrecords import GangRecord, status_of
from gputopo.control.gangstep import Phase, involved
from gputopo.control.gangstep import preempt as preempt_gang
from gputopo.control.gangstep import wait_for_checkpoint as gang_waits
from gputopo.control.holders import (
    gang_checkpoint,
    gang_class,
    gang_holder,
    gang_policy,
    job_holder,
    protection,
)
from gputopo.control.lifecycle import TERMINAL, Config, JobStep, nominate
from gputopo.control.lifecycle import preempt as preempt_job
from gputopo.control.lifecycle import wait_for_checkpoint as job_waits
from gputopo.control.preemptions import (
    Decision,
    Holder,
    PreemptionSettings,
    Wanting,
    decide,
    gang_name,
    hold,
    lapsed,
    may_preempt,
    nomination_of,
    nomination_status,
)
from gputopo.control.priority import JobPriority, job_priority
from gputopo.control.queue import NEVER_FITS, Outcome, QueuedJob
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang
from gputopo.placement.preemption import Nomination, NoPreemption, PreemptionPolicy, resumes_from
from gputopo.placement.shapes import Shape
from gputopo.placement.types import Placement, Request, Snapshot

__all__ = ["PENDING_SECONDS", "Ended", "PreemptionPass", "gang_queued_since", "job_queued_since", "victim_key"]

# How long a nomination decided but not yet read back through the watch is held from memory: its status write
# is then taken as lost, and the preemptor, still unplaced, is decided for again.
PENDING_SECONDS = 30.0
_NAMED_WAITING = 8  # victims a waiting preemptor's message names (the rest counted)


@dataclass(frozen=True, slots=True)
class Ended:
    """A victim ended this pass, for the metrics: its source and the GPU-hours of work it lost."""

    victim: JobKey
    source: str  # "trainingjob" or the gang's source
    gpu_hours_lost: float


def victim_key(name: str) -> JobKey:
    """The key a nomination's victim name stands for (``gang_name`` the other way)."""
    namespace, _, rest = name.partition("/")
    return JobKey((namespace, rest))


@dataclass
class PreemptionPass:
    settings: PreemptionSettings
    jobs: Mapping[JobKey, JobFacts]
    job_pods: Mapping[JobKey, Sequence[PodFacts]]
    steps: dict[JobKey, JobStep]
    gangs: GangPass | None
    view: ClusterView
    config: Config
    now: datetime
    pending: Mapping[JobKey, tuple[Nomination, datetime]] = field(default_factory=dict)  # decided, not read back
    recorded: dict[JobKey, Nomination] = field(default_factory=dict)
    held: dict[JobKey, Placement] = field(default_factory=dict)
    ended: list[Ended] = field(default_factory=list)
    decided: dict[JobKey, Nomination] = field(default_factory=dict)
    lapsed: set[JobKey] = field(default_factory=set)
    nominations: dict[JobKey, Nomination] = field(default_factory=dict)  # what ``read`` found
    placed: set[JobKey] = field(default_factory=set)  # placed by this pass's queue
    retry_at: datetime | None = None  # the earliest checkpoint a preemptor waits for: the pass asks to run again then
    waiting: set[JobKey] = field(default_factory=set)  # the preemptors told this pass to wait for a checkpoint
    trusted: Mapping[JobKey, frozenset[str]] = field(default_factory=dict)  # victims this operator chose, by preemptor
    chosen: dict[JobKey, frozenset[str]] = field(default_factory=dict)  # the victims of this pass's decisions
    admissions: Mapping[JobKey, AdmissionAnswer] | None = None  # the dry runs' answers; None: none is asked
    checks: list[AdmissionCheck] = field(default_factory=list)  # the dry runs to ask before preempting

    # -- what the cluster shows --------------------------------------------------------------------------

    def priority(self, key: JobKey) -> JobPriority | None:
        job = self.jobs.get(key)
        if job is not None and job.spec is not None:
            return job_priority(job.spec, self.view.priority_classes)
        gang = self.gangs.given.gangs.get(key) if self.gangs is not None else None
        if gang is not None and self.gangs is not None:
            bodies = self.gangs.given.bodies
            found = gang_class(gang, bodies, self.view.priority_classes)
            if found is None:
                return JobPriority(gang.priority, gang_policy(gang, bodies))
            policy = gang_policy(gang, bodies)
            return JobPriority(gang.priority, policy, "", found.checkpoint_wait_s, found.protected, found.name)
        return None

    def read(self) -> None:
        """Every nomination the statuses record (after this pass's steps), and those decided but not read back."""
        found: dict[JobKey, Nomination] = {}
        for key, job in self.jobs.items():
            status = self.steps[key].status if key in self.steps else job.status
            nomination = nomination_of(key, status.nomination)
            if nomination is not None and status.phase not in TERMINAL and not job.deleting:
                found[key] = nomination
        if self.gangs is not None:
            records = {**self.gangs.given.records, **{k: s.record for k, s in self.gangs.steps.items()}}
            for key, record in records.items():
                if key in self.gangs.given.gangs and (nomination := nomination_of(key, record.nomination)) is not None:
                    found[key] = nomination
        self.recorded = dict(found)
        for key, (nomination, since) in self.pending.items():
            if (self.now - since).total_seconds() < PENDING_SECONDS and self._exists(key):
                found.setdefault(key, nomination)
        self.nominations = found

    def _exists(self, key: JobKey) -> bool:
        return key in self.jobs or (self.gangs is not None and key in self.gangs.given.gangs)

    def carried(self) -> dict[JobKey, tuple[Nomination, datetime]]:
        """The nominations decided and not yet read back, for the next pass: those decided now, and earlier ones
        still going out (for ``PENDING_SECONDS`` at most)."""
        out = {
            k: v
            for k, v in self.pending.items()
            if k not in self.recorded
            and k not in self.placed
            and k not in self.lapsed
            and self._exists(k)
            and (self.now - v[1]).total_seconds() < PENDING_SECONDS
        }
        out.update((k, (n, self.now)) for k, n in self.decided.items())
        return out

    def named(self, key: JobKey, reader: str) -> str:
        """How a message read in namespace ``reader`` names the gang ``key``: by its name in its own namespace, by
        its UID in another's (as Kueue names another tenant's workload), never by that tenant's names."""
        if key[0] == reader:
            return gang_name(key)
        return f"a gang of another namespace (UID {self._uid(key) or 'unknown'})"

    def written(self, key: JobKey, reader: str) -> str:
        """How a list written into an object of namespace ``reader`` (a nomination's victims, a victim's
        ``preemptedBy``) names the gang ``key``: ``<namespace>/<name>`` in its own namespace, ``uid:<UID>`` in
        another's. The operator's memory keeps the names; ``known`` reads such a list back into them."""
        return gang_name(key) if key[0] == reader else f"uid:{self._uid(key) or 'unknown'}"

    def known(self, entries: Iterable[str], among: Iterable[str], reader: str) -> dict[str, str]:
        """The names (of ``among``) the ``entries`` of a list written into namespace ``reader`` stand for."""
        forms = {form: name for name in among for form in (name, self.written(victim_key(name), reader))}
        return {entry: forms[entry] for entry in entries if entry in forms}

    def _by_name(self, by: frozenset[str]) -> frozenset[str]:
        """A ``preemptedBy`` list as names: an entry ``uid:<UID>`` (a gang of another namespace) is the name of the
        job or gang with that UID now (kept as written when none has it)."""
        if not any(b.startswith("uid:") for b in by):
            return by
        keys = [*self.jobs, *(self.gangs.given.gangs if self.gangs is not None else ())]
        names = {f"uid:{uid}": gang_name(k) for k in keys if (uid := self._uid(k))}
        return frozenset(names.get(b, b) for b in by)

    def _uid(self, key: JobKey) -> str:
        """A TrainingJob's UID; a foreign gang's GangPlacement's, else its owner's, else its first pod's."""
        if key in self.jobs:
            return self.jobs[key].uid
        if self.gangs is None or (gang := self.gangs.given.gangs.get(key)) is None:
            return ""
        record = self.gangs.given.records.get(key)
        if record is not None and record.uid:
            return record.uid
        if gang.owner is not None:
            return gang.owner.uid
        return min(gang.members, key=lambda m: m.rank).uid if gang.members else ""

    # -- step 2: the victims of recorded nominations ended -----------------------------------------------------

    def carry_out(self) -> None:
        """End each victim a recorded nomination names that still holds its plan (and is of lower priority), when
        this operator decided that nomination; any other is cleared, and ends nobody."""
        for key in sorted(self.recorded):
            status = self._nomination_status(key)
            mine = self.priority(key)
            if status is None or mine is None:
                continue
            chosen = self.trusted.get(key)
            names = self.known(status.victims, chosen or (), key[0])
            if chosen is None or len(names) < len(status.victims):
                self._clear(key, "the nomination is not one this operator decided: it is decided again")
                continue
            for entry in status.victims:
                self._end(victim_key(names[entry]), key, mine.value, status.domain)

    def kept_trust(self) -> dict[JobKey, frozenset[str]]:
        """The victims chosen per preemptor, for the next pass: those of nominations still recorded or going out."""
        live = set(self.recorded) | set(self.carried())
        out = {k: v for k, v in self.trusted.items() if k in live and k not in self.lapsed and k not in self.placed}
        out.update(self.chosen)
        return out

    def _nomination_status(self, key: JobKey) -> NominationStatus | None:
        if key in self.steps:
            return self.steps[key].status.nomination
        if self.gangs is not None and key in self.gangs.steps:
            return self.gangs.steps[key].record.nomination
        if key in self.jobs:
            return self.jobs[key].status.nomination
        record = self.gangs.given.records.get(key) if self.gangs is not None else None
        return record.nomination if record is not None else None

    def _end(self, victim: JobKey, preemptor: JobKey, priority: int, domain: str) -> None:
        theirs = self.priority(victim)
        if theirs is None or theirs.value >= priority:
            return
        by = self.written(preemptor, victim[0])
        message = f"preempted by {self.named(preemptor, victim[0])} (priority {priority}) to clear {domain}"
        now = self.now
        if victim in self.steps:
            job, out = self.jobs[victim], self.steps[victim]
            placement = out.status.placement
            gpus = sum(len(w.gpus) for w in placement.workers) if placement is not None else 0
            since = _work_since(job, out.status)
            if since is not None and job.checkpoint_time is not None:
                since = max(since, job.checkpoint_time)
            every = job.spec.preemption.checkpoint_interval_seconds if job.spec is not None else None
            since = _resumes_from(since, every, now)
            pods = self.job_pods.get(victim, ())
            if preempt_job(job, out, pods, now, self.view, self.config, by, message):
                self.ended.append(Ended(victim, "trainingjob", _hours(gpus, since, now)))
            return
        if self.gangs is None or victim not in self.gangs.steps or victim not in self.gangs.given.gangs:
            return  # not stepped this pass (its writes are still going out): the next pass ends it
        done, gang = self.gangs.steps[victim], self.gangs.given.gangs[victim]
        gpus = sum(len(p.gpus) for p in done.record.ranks)
        since = done.record.planned_at
        checkpoint, interval = gang_checkpoint(gang, self.gangs.given.bodies)
        if since is not None and checkpoint is not None:
            since = max(since, checkpoint)
        since = _resumes_from(since, interval, now)
        if preempt_gang(gang, done, by, message, now):
            self.ended.append(Ended(victim, gang.id.source, _hours(gpus, since, now)))

    # -- nominations held in the queue, and let go -------------------------------------------------------------

    def _live(self) -> dict[JobKey, Nomination]:
        return {k: n for k, n in self.nominations.items() if k not in self.lapsed}

    def hold(self, snapshot: Snapshot, queued: list[QueuedJob]) -> Snapshot:
        """The snapshot with the nominations held; each nominated job in ``queued`` gets its own GPUs back, and a
        nomination whose GPUs no longer hold its preemptor lapses (cleared, with an Event)."""
        # A gang is checked by its planner: one of several GPU shapes is more than its queue entry's request.
        pending = {q.key: q.planner or q.request for q in queued if q.key in self.nominations}
        for key, why in lapsed(snapshot, self.nominations, pending).items():
            self._clear(key, f"the nomination lapsed: {why}")
        held_snapshot, self.held = hold(snapshot, self._live())
        queued[:] = [replace(q, nominated=self.held[q.key]) if q.key in self.held else q for q in queued]
        return held_snapshot

    def _clear(self, key: JobKey, why: str) -> None:
        self.lapsed.add(key)
        if key in self.steps:
            out = self.steps[key]
            out.status.nomination = None
            out.actions.event("Normal", "NominationLapsed", why)
        elif self.gangs is not None and key in self.gangs.steps:
            done = self.gangs.steps[key]
            done.record = replace(done.record, nomination=None)
            done.actions.status = status_of(done.record)
            done.actions.event(involved(self.gangs.given.gangs[key]), "Normal", "NominationLapsed", why)

    # -- step 1: new preemptions decided ---------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot, outcomes: Sequence[Outcome]) -> None:
        """Preempt for the gangs the queue could not place and that hold no nomination (those wait for it); the
        jobs the queue placed are never victims."""
        self.placed = {o.queued.key for o in outcomes if isinstance(o.result, Placement)}
        live = self._live()
        wanting = [w for o in outcomes if (w := self._wanting(o)) is not None and w.key not in live]
        if not wanting:
            return
        holders = [h for h in self._holders(snapshot) if h.key not in self.placed]
        decisions, refused = decide(snapshot, wanting, holders, live, self.settings, self.now.timestamp())
        for decision in decisions:
            self._nominate(decision)
        for key, why in sorted(refused.items()):
            if why.retry_at is not None:
                self._wait(key, why, why.retry_at)

    def _wanting(self, outcome: Outcome) -> Wanting | None:
        if isinstance(outcome.result, Placement) or outcome.result.reason.startswith(("waiting behind", NEVER_FITS)):
            return None
        key = outcome.queued.key
        found = self.priority(key)
        if found is None or found.policy is PreemptionPolicy.NEVER:
            return None
        if not may_preempt(self.settings, found.class_name, key[0]):
            return None  # the operator's list of preemptors does not name its class in its namespace
        request: Request | None = outcome.queued.request
        shapes: tuple[Shape, ...] = ()
        record: PreemptionStatus | None = None
        since: datetime | None = None
        if key in self.jobs:
            if not self._admitted(key):
                return None
            status = self.steps[key].status if key in self.steps else self.jobs[key].status
            record = status.preemption if key in self.steps else None
            since = job_queued_since(self.jobs[key], status)
        elif self.gangs is not None and key in self.gangs.given.gangs:
            gang = self.gangs.given.gangs[key]
            if gang.owner is None and gang.missing():
                return None  # its size is only its own pods' word: no preemption for ranks that do not exist
            requester = self.gangs.given.requester
            shapes = (requester(gang) if requester is not None else None) or ()
            request = shapes[0].request if shapes else None
            done = self.gangs.steps.get(key)
            record = done.record.preemption if done is not None else None
            since = gang_queued_since(gang, done.record if done is not None else self.gangs.given.records.get(key))
        if request is None:
            return None
        at, by = protection(record)
        by = self._by_name(by)
        waiting_since = since.timestamp() if since is not None else None
        return Wanting(key, request, found.value, found.policy, by, at, shapes, found.checkpoint_wait_s, waiting_since)

    def _admitted(self, key: JobKey) -> bool:
        """Whether the API server said it would admit the job's pods; when not asked yet (or asked of the job as it
        was), the dry run is asked for and the job preempts nobody this pass."""
        if self.admissions is None:
            return True
        job = self.jobs[key]
        answer = self.admissions.get(key)
        if answer is None or answer.signature != admission_signature(job):
            node = min(self.view.nodes, default=None)
            check = admission_check(job, node) if node is not None else None
            if check is not None:
                self.checks.append(check)
            return False
        if answer.refusal and key in self.steps:
            status = self.steps[key].status
            placed = next((c for c in status.conditions if c.type == PLACED), None)
            said = f"it preempts nobody: the API server would refuse its pods: {answer.refusal}"
            if placed is not None and said not in placed.message:
                message = f"{placed.message}; {said}" if placed.message else said
                status.conditions = set_condition(status.conditions, placed.model_copy(update={"message": message}))
        return not answer.refusal

    def _holders(self, snapshot: Snapshot) -> list[Holder]:
        out: list[Holder] = []
        for key, step in self.steps.items():
            job, placement = self.jobs[key], step.status.placement
            before = job.status.placement
            if placement is None or before is None or before.generation != placement.generation:
                continue  # placed this pass, or let go by its step
            if step.status.phase not in (JobPhase.RUNNING, JobPhase.PLACING) or job.deleting:
                continue
            found = self.priority(key)
            if found is not None and (
                h := job_holder(job, placement, found.value, _work_since(job, step.status), snapshot, found.protected)
            ):
                out.append(h)
        if self.gangs is not None:
            given = self.gangs.given
            for key, done in self.gangs.steps.items():
                record = done.record
                if key not in given.gangs or record.phase not in (Phase.PLANNED, Phase.RUNNING):
                    continue
                if key not in given.records or given.records[key].generation != record.generation:
                    continue  # planned this pass
                found = self.priority(key)
                protected = found is not None and found.protected
                if (h := gang_holder(given.gangs[key], record, given.bodies, snapshot, protected)) is not None:
                    out.append(h)
        return out

    def _wait(self, key: JobKey, why: NoPreemption, retry_at: float) -> None:
        """The preemptor waits for its victims' next checkpoint: it says so, and the pass wakes then."""
        when = datetime.fromtimestamp(retry_at, UTC)
        self.retry_at = when if self.retry_at is None else min(self.retry_at, when)
        self.waiting.add(key)
        victims = ", ".join(self.named(victim_key(v), key[0]) for v in why.details[:_NAMED_WAITING]) or "its victims"
        if len(why.details) > _NAMED_WAITING:
            victims += f" and {len(why.details) - _NAMED_WAITING} more"
        head = f"waiting until {when.isoformat(timespec='seconds')} for the next checkpoint of {victims}"
        message = f"{head} before preempting: {why.reason}"
        if key in self.steps:
            job_waits(self.jobs[key], self.steps[key], head, message, self.now, self.view, self.config)
        elif self.gangs is not None and key in self.gangs.steps:
            gang = self.gangs.given.gangs[key]
            gang_waits(gang, self.gangs.steps[key], self.gangs.given.records.get(key), head, message)

    def _nominate(self, decision: Decision) -> None:
        key, plan = decision.preemptor, decision.plan
        status = nomination_status(plan, self.now)
        chosen = frozenset(status.victims)
        names = ", ".join(self.named(victim_key(v), key[0]) for v in status.victims)
        written = dict.fromkeys(self.written(victim_key(v), key[0]) for v in status.victims)  # a set on the API
        status = status.model_copy(update={"victims": list(written)})
        message = (
            f"preempting {len(plan.victims)} lower-priority {'gang' if len(plan.victims) == 1 else 'gangs'} "
            f"({names}) to clear {plan.domain.name}: estimated bus bandwidth {plan.placement.busbw_gbps:.1f} GB/s "
            "there once they end"
        )
        if key in self.steps:
            nominate(self.jobs[key], self.steps[key], status, message, self.now, self.view, self.config)
        elif self.gangs is not None and key in self.gangs.steps:
            done = self.gangs.steps[key]
            done.record = replace(done.record, nomination=status, phase=Phase.PENDING, message=message)
            done.actions.status = status_of(done.record)
            done.actions.event(involved(self.gangs.given.gangs[key]), "Normal", "Preempting", message)
        else:
            return
        self.decided[key] = plan.nomination
        self.chosen[key] = chosen


def _work_since(job: JobFacts, status: TrainingJobStatus) -> datetime | None:
    """When the job's current gang started: its last placement's, as the Placed condition's transition says."""
    placed = next((c for c in status.conditions if c.type == PLACED and c.status == "True"), None)
    return placed.last_transition_time if placed is not None and placed.last_transition_time else status.start_time


def job_queued_since(job: JobFacts, status: TrainingJobStatus) -> datetime | None:
    """When the job was queued, as its status shows it: since when it is ``Placed=False`` (a new job since its first
    pass, a job preempted, restarted or re-planned since then), and not before Kueue admitted it nor its spec was
    made valid. A preemptor's ``checkpoint-wait-seconds`` counts from then. Condition times are whole seconds; the
    job's creation when no condition says."""
    times = [job.created] if job.created is not None else []
    for c in status.conditions:
        if c.last_transition_time is None:
            continue
        if (c.type, c.status) in ((PLACED, "False"), (KUEUE_ADMITTED, "True"), (INVALID, "False")):
            times.append(c.last_transition_time)
    return max(times, default=None)


def gang_queued_since(gang: Gang, record: GangRecord | None) -> datetime | None:
    """When a foreign gang was queued, as its pods and record show it: not before its oldest live pod was made (a
    gang evicted or preempted is made again), its last plan (a plan let go), nor its last preemption."""
    made = [m.created for m in gang.by_rank.values() if not m.gone and m.created is not None]
    times = [min(made)] if made else []
    if record is not None and record.planned_at is not None:
        times.append(record.planned_at)
    if record is not None and record.preemption is not None and record.preemption.last_preempted_at is not None:
        times.append(record.preemption.last_preempted_at)
    return max(times, default=None)


def _resumes_from(since: datetime | None, interval: float | None, now: datetime) -> datetime | None:
    """What a restart at ``now`` resumes from (``resumes_from``, on the API's times)."""
    if since is None:
        return None
    return datetime.fromtimestamp(resumes_from(since.timestamp(), interval, now.timestamp()), since.tzinfo)


def _hours(gpus: int, since: datetime | None, now: datetime) -> float:
    return gpus * max(0.0, (now - since).total_seconds()) / 3600 if since is not None else 0.0
