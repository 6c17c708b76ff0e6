"""One job's step in a control-loop pass: from its status and its pods to actions (pure).

Level-triggered: everything is worked out from what is observed now, so a restarted operator carries
on where the last one stopped. The phases:

  Pending ──placed──► Placing ──all pods bound and running──► Running ──all ranks succeed──► Succeeded
     ▲                   │  └─ unschedulable too long ─► Pending          │
     │                   └──────────────── fault / worker failure ────────┴─► Rescheduling ─► (re-placed)
     └─ (queue)                                 restarts exhausted, deadline ──────────────► Failed

A job in a Kueue queue (label ``kueue.x-k8s.io/queue-name``) stays Pending until Kueue admits its Workload, and goes
back to Pending, its gang taken down, when Kueue evicts it (``kueue_quota``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gputopo.api.conditions import (
    DEGRADED,
    FAILED,
    GPUS_AS_PLANNED,
    INVALID,
    KUEUE_ADMITTED,
    PLACED,
    PREEMPTED,
    SUCCEEDED,
    Condition,
    set_condition,
)
from gputopo.api.preemption import MAX_NAMED, NominationStatus, PreemptionStatus
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobSpec, TrainingJobStatus, WorkerPlacement
from gputopo.control.actions import JobActions, PodDeletion, WorkloadPatch
from gputopo.control.bandwidth import estimate_workers
from gputopo.control.dra import ClaimFacts, GpuAllocation, claim_manifest, claim_name
from gputopo.control.facts import JobFacts, PodFacts
from gputopo.control.failure import Action, backoff_delay, decide, faults_under
from gputopo.control.kueue_quota import (
    KUEUE_API_VERSION,
    QUEUE_LABEL,
    Admission,
    QueueNameRule,
    Reading,
    finish_patch,
    read,
    release_patch,
    workload_manifest,
)
from gputopo.control.ledger import PlannedGang
from gputopo.control.pods import is_gang, owner_reference, pod_manifest, pod_name, service_manifest
from gputopo.control.priority import job_priority
from gputopo.control.validation import problems
from gputopo.control.view import ClusterView
from gputopo.gangs.unbound import give_up_at
from gputopo.placement.types import GpuChoice, Placement, TierConfig, Unplaceable
from gputopo.topology.views import nearest_nics

__all__ = [
    "GPUS_AS_PLANNED",
    "POD_REFUSED",
    "WAITING_FOR_CHECKPOINT",
    "Config",
    "JobStep",
    "Restart",
    "nominate",
    "preempt",
    "settle",
    "step",
    "unreadable",
    "wait_for_checkpoint",
]

# The Invalid condition's reason when the API server refused the gang's pods (recorded per generation).
POD_REFUSED = "PodRefused"
# The Placed condition's reason (and the Event's) while a preemptor waits for its victims' next checkpoint.
WAITING_FOR_CHECKPOINT = "WaitingForCheckpoint"
_UNPLACED_EVENTS = ("Unplaceable", "WaitingForCapacity")  # settle's Events for a job the queue could not place
_MESSAGE_LIMIT = 1024  # a condition's message is cut to this

_API_TIME_RESOLUTION = timedelta(seconds=1)  # metav1.Time is serialised in whole seconds
_REPORT_RECHECK = timedelta(seconds=5)  # how soon to look again at a report from the second of a binding

TERMINAL = (JobPhase.SUCCEEDED, JobPhase.FAILED)


@dataclass(frozen=True, slots=True)
class Config:
    tiers: TierConfig
    unschedulable_timeout: float = 120.0
    not_ready_grace: float = 40.0
    gpu_allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN
    queue_names: QueueNameRule = field(default_factory=QueueNameRule)  # whether a job must name a Kueue LocalQueue

    @property
    def gpu_choice(self) -> GpuChoice:
        return self.gpu_allocation.gpu_choice


@dataclass(frozen=True, slots=True)
class Restart:
    reason: str


@dataclass
class JobStep:
    actions: JobActions
    status: TrainingJobStatus  # the status after this step (written when it differs)
    wants_placement: bool = False
    avoid_nodes: frozenset[str] = frozenset()
    wake_at: datetime | None = None
    restart: Restart | None = None
    old_pods_left: bool = False
    gpus_held: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)

    def wake(self, when: datetime) -> None:
        self.wake_at = when if self.wake_at is None else min(self.wake_at, when)


class _Step:
    """Working state of one step: the job, the status being built, the actions being collected."""

    def __init__(
        self, job: JobFacts, now: datetime, view: ClusterView, config: Config, out: JobStep | None = None
    ) -> None:
        self.job = job
        self.now = now
        self.view = view
        self.config = config
        # A step the queue settles goes on from the JobStep the pass produced for the job.
        self.out = out if out is not None else JobStep(JobActions(job.key, job.uid), _working_copy(job.status))
        self.status = self.out.status
        self.ours: list[PodFacts] = []
        self.claims: list[ClaimFacts] = []  # the job's ResourceClaims (DRA mode)

    def condition(self, type_: str, status: bool | None, reason: str, message: str = "") -> bool:
        """Set a condition (``None``: Unknown); True when it changed (status, reason or message)."""
        new = Condition(
            type=type_,
            status="Unknown" if status is None else "True" if status else "False",
            reason=reason,
            message=message[:_MESSAGE_LIMIT],
            observed_generation=self.job.generation,
        )
        old = next((c for c in self.status.conditions if c.type == type_), None)
        self.status.conditions = set_condition(self.status.conditions, new, self.now)
        return old is None or (old.status, old.reason, old.message) != (new.status, new.reason, new.message)

    def is_true(self, type_: str) -> bool:
        return any(c.type == type_ and c.status == "True" for c in self.status.conditions)

    def delete(self, pods: Sequence[PodFacts], grace: int) -> None:
        for pod in pods:
            if not pod.deleting:
                self.out.actions.deletions.append(PodDeletion(pod.name, grace))

    def delete_claims(self, keep_generation: int | None = None) -> None:
        """Delete the job's claims but those of ``keep_generation`` (all of them when None)."""
        for claim in self.claims:
            ours = claim.owner_uid == self.job.uid
            if claim.deleting or (ours and keep_generation is not None and claim.generation == keep_generation):
                continue
            if claim.name not in self.out.actions.claim_deletions:
                self.out.actions.claim_deletions.append(claim.name)

    def finish(self, phase: JobPhase, reason: str, message: str) -> None:
        self.status.phase = phase
        self.status.completion_time = self.status.completion_time or self.now
        kind = SUCCEEDED if phase is JobPhase.SUCCEEDED else FAILED
        if self.condition(kind, True, reason, message):
            self.out.actions.event("Normal" if phase is JobPhase.SUCCEEDED else "Warning", reason, message)
        self.condition(PLACED, False, reason, "the job has finished")

    def clear_placement(self) -> None:
        generation = self.status.placement.generation if self.status.placement else 0
        self.status.placement = PlacementStatus(generation=generation)


def _working_copy(status: TrainingJobStatus) -> TrainingJobStatus:
    """A copy of the status that a step may change without touching the job's facts.

    Steps assign the status's fields, replace its list of conditions (``set_condition`` builds a new one) and
    its placement's workers, and change only the placement's estimate in place: so the status and its placement
    are copied and the rest is shared. A deep copy of every job's status in every pass was most of a pass's
    time outside the planner."""
    working = status.model_copy()
    working.conditions = list(status.conditions)
    if status.placement is not None:
        working.placement = status.placement.model_copy()
    return working


def _placed(status: TrainingJobStatus) -> PlacementStatus | None:
    placement = status.placement
    return placement if placement is not None and placement.workers else None


def _refused(status: TrainingJobStatus, generation: int) -> str | None:
    """The API server's refusal of this generation's pods, as the status recorded it."""
    for c in status.conditions:
        if c.type == INVALID and c.status == "True" and c.reason == POD_REFUSED and c.observed_generation == generation:
            return c.message
    return None


def step(
    job: JobFacts,
    pods: Sequence[PodFacts],
    view: ClusterView,
    config: Config,
    now: datetime,
    refusal: str | None = None,
) -> JobStep:
    """``refusal``: the API server's answer when it refused to create this generation's pods (a 4xx)."""
    s = _Step(job, now, view, config)
    status, out = s.status, s.out
    # Pods of an earlier job of the same name are not ours: the garbage collector may not have got to them.
    strangers = [p for p in pods if p.owner_uid != job.uid]
    ours = [p for p in pods if p.owner_uid == job.uid]
    s.ours = ours
    s.delete(strangers, 0)
    out.gpus_held = [(p.node, p.planned_gpus) for p in ours if p.node and p.planned_gpus and p.holds_gpus]
    if view.dra is not None:
        s.claims = list(view.dra.claims_of(job.namespace, job.name))

    if job.deleting:
        return out
    if status.phase in TERMINAL:
        s.delete([p for p in ours if p.holds_gpus], 0)
        s.delete_claims()
        ttl = job.spec.run_policy.ttl_seconds_after_finished if job.spec else None
        if ttl is not None and status.completion_time is not None:
            expiry = status.completion_time + timedelta(seconds=ttl)
            if now >= expiry:
                out.actions.delete_job = True
            else:
                out.wake(expiry)
        _kueue_finished(s)
        return _done(s)

    found = problems(job, config.tiers)
    if job.spec is not None and (unknown := job_priority(job.spec, view.priority_classes).problem):
        found.append(unknown)
    if found:
        if s.condition(INVALID, True, "InvalidSpec", "; ".join(found)):
            out.actions.event("Warning", "InvalidSpec", "; ".join(found))
        if _placed(status) is None:
            s.condition(PLACED, False, "InvalidSpec", "fix the spec to queue the job")
            _kueue_dropped(s)
            return _done(s)
    else:
        refused = refusal or _refused(status, job.generation)
        if refused is not None:
            # The API server will refuse these pods again until the spec changes: give the GPUs back, stop.
            if s.condition(INVALID, True, POD_REFUSED, refused):
                out.actions.event("Warning", POD_REFUSED, refused)
            s.delete([p for p in ours if not p.deleting], 0)
            s.delete_claims()
            if _placed(status) is not None:
                s.clear_placement()
            status.phase = JobPhase.PENDING
            s.condition(PLACED, False, POD_REFUSED, "fix the pod template to queue the job again")
            _kueue_dropped(s)
            return _done(s)
        if s.is_true(INVALID):
            s.condition(INVALID, False, "Valid", "")
    spec = job.spec
    assert spec is not None  # problems() reports a spec that does not parse

    deadline = spec.run_policy.active_deadline_seconds
    if deadline is not None and status.start_time is not None:
        expiry = status.start_time + timedelta(seconds=deadline)
        if now >= expiry:
            s.delete([p for p in ours if p.holds_gpus], spec.failure_policy.grace_period_seconds)
            s.finish(JobPhase.FAILED, "DeadlineExceeded", f"active for more than {deadline}s")
            return _done(s)
        out.wake(expiry)

    placement = _placed(status)
    ranks = {w.rank for w in placement.workers} if placement else set()
    current = {
        p.rank: p
        for p in ours
        if placement and p.rank is not None and p.generation == placement.generation and p.rank in ranks
    }
    old = [p for p in ours if p.rank not in current or current[p.rank] is not p]
    out.old_pods_left = bool(old)
    if old:
        s.delete(old, _grace_for(old, view, spec))

    s.delete_claims(placement.generation if placement is not None else None)
    held = _kueue(s, spec, placement)
    if held is not None:
        return held
    if placement is None:
        return _unplaced(s, spec)
    return _placed_step(s, spec, placement, current, bool(old))


def _grace_for(pods: Sequence[PodFacts], view: ClusterView, spec: TrainingJobSpec) -> int:
    """No grace on nodes whose kubelet is gone (it would never finish the termination)."""
    lost = any(p.node and (p.node not in view.nodes or not view.nodes[p.node].ready) for p in pods)
    return 0 if lost else spec.failure_policy.grace_period_seconds


def _kueue(s: _Step, spec: TrainingJobSpec, placement: PlacementStatus | None) -> JobStep | None:
    """A job in a Kueue queue (``kueue_quota``): its Workload made, and the step ended here unless Kueue admits it.
    None: go on as any job does (admitted, or not in a queue)."""
    job, kueue = s.job, s.view.kueue
    queue = job.queue_name
    if queue is None:
        if placement is None and (why := s.config.queue_names.refusal(job.namespace)) is not None:
            s.condition(PLACED, False, "WaitingForQueueName", why)
            s.status.phase = JobPhase.PENDING
            return _done(s)
        if kueue is not None and placement is None:  # taken out of its queue: its Workloads go
            s.out.actions.workload_deletions += [w.name for w in kueue.of(job.uid) if not w.deleting]
        s.status.conditions = [c for c in s.status.conditions if c.type != KUEUE_ADMITTED]
        return None
    if kueue is None:
        if placement is not None:
            return None  # placed before Kueue's API went away: it runs on
        message = (
            f"the job names Kueue LocalQueue {queue} (label {QUEUE_LABEL}), but Kueue's Workload API "
            f"({KUEUE_API_VERSION} workloads) is not served here (or not read yet): install Kueue, or remove the label "
            "to place the job without Kueue's quota"
        )
        if s.condition(KUEUE_ADMITTED, False, "KueueNotInstalled", message):
            s.out.actions.event("Warning", "KueueNotInstalled", message)
        s.condition(PLACED, False, "KueueNotInstalled", "waiting for Kueue's Workload API to be served")
        s.status.phase = JobPhase.PENDING
        return _done(s)
    reading = read(job.name, job.uid, job.generation, queue, kueue.of(job.uid), placed=placement is not None)
    s.out.actions.workload_deletions += [w.name for w in reading.stale]
    if reading.admission is Admission.ADMITTED:
        assert reading.workload is not None
        where = f"Workload {reading.name} is admitted by ClusterQueue {reading.workload.cluster_queue}"
        if not s.is_true(KUEUE_ADMITTED):
            s.out.actions.event("Normal", KUEUE_ADMITTED, where)  # said in the Placed Event if placed at once
        s.condition(KUEUE_ADMITTED, True, "Admitted", where)
        return None
    if reading.admission is Admission.EVICTED or placement is not None:
        return _kueue_evicted(s, spec, placement, reading)
    if reading.admission is Admission.MISSING:
        priority = job_priority(spec, s.view.priority_classes).value
        s.out.actions.workload = workload_manifest(
            job.namespace, job.name, job.uid, job.generation, spec, queue, priority
        )
    said = f": {reading.message}" if reading.message else ""
    waiting = f"waiting for Kueue to admit Workload {reading.name} from LocalQueue {queue}{said}"
    if s.condition(KUEUE_ADMITTED, False, "WaitingForKueue", waiting) and reading.admission is Admission.MISSING:
        s.out.actions.event("Normal", "WaitingForKueue", waiting)
    s.condition(PLACED, False, "WaitingForKueue", f"waiting for Kueue to admit the job from LocalQueue {queue}")
    s.status.phase = JobPhase.PENDING
    return _done(s)


def _kueue_evicted(s: _Step, spec: TrainingJobSpec, placement: PlacementStatus | None, reading: Reading) -> JobStep:
    """Kueue took the job's admission back: its pods go with their grace period (their time to checkpoint) and its
    plan is given up; once no pod of it is left the Workload's admission is cleared, so Kueue queues it again. The
    job waits for admission, the restart budget untouched."""
    reason = reading.reason or "AdmissionRemoved"
    words = f": {reading.message}" if reading.message else ""
    message = f"Kueue evicted Workload {reading.name} ({reason}){words}"
    if placement is not None:
        live = [p for p in s.ours if p.holds_gpus]
        s.delete(live, _grace_for(live, s.view, spec))
        s.delete_claims()
        s.clear_placement()
        s.out.old_pods_left = True
        s.out.actions.event("Warning", "KueueEvicted", f"{message}; taking the gang down")
    elif reading.workload is not None and reading.workload.has_admission and not any(p.holds_gpus for p in s.ours):
        s.out.actions.workload_patches.append(WorkloadPatch(reading.name, release_patch(reading.workload, s.now)))
    s.condition(KUEUE_ADMITTED, False, reason, f"{message}; waiting for Kueue to admit it again")
    s.condition(PLACED, False, "KueueEvicted", message)
    s.status.phase = JobPhase.PENDING
    return _done(s)


def _kueue_dropped(s: _Step) -> None:
    """An Invalid job holds no Kueue quota: its Workloads go (the fixed spec, a new generation, gets a new one)."""
    if s.view.kueue is not None:
        s.out.actions.workload_deletions += [w.name for w in s.view.kueue.of(s.job.uid) if not w.deleting]


def _kueue_finished(s: _Step) -> None:
    """A finished job's Workloads are marked Finished, giving their quota back."""
    kueue, status = s.view.kueue, s.status
    if kueue is None:
        return
    succeeded = status.phase is JobPhase.SUCCEEDED
    said = next((c.message for c in status.conditions if c.type == (SUCCEEDED if succeeded else FAILED)), "")
    for w in kueue.of(s.job.uid):
        if not w.finished and not w.deleting:
            patch = finish_patch(w, succeeded, said or f"the TrainingJob {status.phase.lower()}", s.now)
            s.out.actions.workload_patches.append(WorkloadPatch(w.name, patch))


def _unplaced(s: _Step, spec: TrainingJobSpec) -> JobStep:
    status, out = s.status, s.out
    if status.restarts > 0:
        status.phase = JobPhase.RESCHEDULING
        delay = backoff_delay(spec.failure_policy, status.restarts)
        if status.last_restart_time is not None and delay > 0:
            ready_at = status.last_restart_time + timedelta(seconds=delay)
            if s.now < ready_at:
                s.condition(PLACED, False, "BackOff", f"re-placement {status.restarts} waits {delay:g}s")
                out.wake(ready_at)
                return _done(s)
    else:
        status.phase = JobPhase.PENDING
    # The old gang may still be terminating: plan now, create the new pods once the names are free.
    out.wants_placement = True
    return _done(s)


def _placed_step(
    s: _Step, spec: TrainingJobSpec, placement: PlacementStatus, current: dict[int, PodFacts], old_left: bool
) -> JobStep:
    """A job with a plan: the rules below in turn, the first that settles the job ending the step; then the status
    follows what the probes report, and the faults under the gang are judged."""
    if old_left:
        s.status.phase = JobPhase.RESCHEDULING if s.status.restarts else JobPhase.PLACING
        s.condition(PLACED, True, "WaitingForOldPods", "the previous gang is terminating")
        return _with_faults(s, spec, placement)
    settled = (
        _claims_blocked(s, placement, current)
        or _ranks_missing(s, spec, placement, current)
        or _worker_ended(s, spec, placement, current)
        or _binding_timed_out(s, placement, current)
    )
    if settled is not None:
        return settled
    _follow_reality(s, placement, current)
    return _with_faults(s, spec, placement)


def _claims_blocked(s: _Step, placement: PlacementStatus, current: dict[int, PodFacts]) -> JobStep | None:
    """DRA: a planned device a rank not yet bound can never get re-plans the job. Checked before the gang is whole
    too: a rank whose pod cannot be created yet must not keep a plan whose devices someone else has taken."""
    if s.config.gpu_allocation is not GpuAllocation.DRA:
        return None
    blocked = _blocked_claims(s, placement, current)
    if not blocked:
        return None
    return _replan(s, list(current.values()), "ClaimUnallocatable", "; ".join(blocked), frozenset())


def _ranks_missing(
    s: _Step, spec: TrainingJobSpec, placement: PlacementStatus, current: dict[int, PodFacts]
) -> JobStep | None:
    """A rank without its pod: lost when the job runs (a restart), else still to be created."""
    missing = [w for w in placement.workers if w.rank not in current]
    if not missing:
        return None
    if s.status.phase is JobPhase.RUNNING:
        lost = f"{pod_name(s.job.name, missing[0].rank)} disappeared"
        return _restart(s, spec, "WorkerLost", lost, current)
    _create_gang(s, spec, placement, missing)
    s.status.phase = JobPhase.PLACING
    return _with_faults(s, spec, placement)


def _worker_ended(
    s: _Step, spec: TrainingJobSpec, placement: PlacementStatus, current: dict[int, PodFacts]
) -> JobStep | None:
    """A worker failed or is being deleted (a restart), or every worker succeeded (the job did)."""
    gang = [current[w.rank] for w in placement.workers]
    failed = [p for p in gang if p.phase == "Failed"]
    if failed:
        return _restart(s, spec, "WorkerFailed", f"{failed[0].name} failed", current)
    lost = [p for p in gang if p.deleting and not p.finished]
    if lost:
        return _restart(s, spec, "WorkerLost", f"{lost[0].name} is being deleted", current)
    if all(p.phase == "Succeeded" for p in gang):
        s.finish(JobPhase.SUCCEEDED, "AllWorkersSucceeded", f"{len(gang)} workers succeeded")
        return _done(s)
    return None


def _binding_timed_out(s: _Step, placement: PlacementStatus, current: dict[int, PodFacts]) -> JobStep | None:
    """Running once every worker is bound and running; until then Placing, and a gang kube-scheduler did not bind
    for ``unschedulable_timeout`` (whatever reason it gave, ``gputopo.gangs.unbound``) is planned again elsewhere."""
    status, out, now, timeout = s.status, s.out, s.now, s.config.unschedulable_timeout
    gang = [current[w.rank] for w in placement.workers]
    if all(p.node and p.phase in ("Running", "Succeeded") for p in gang):
        if status.phase is not JobPhase.RUNNING:
            out.actions.event("Normal", "Running", f"all {len(gang)} workers are running")
        status.phase = JobPhase.RUNNING
        return None
    status.phase = JobPhase.PLACING
    due = {p.name: at for p in gang if (at := give_up_at(p.refusal, p.created, timeout)) is not None}
    if not due or now < min(due.values()):
        if due:
            out.wake(min(due.values()))
        return None
    stuck = [p for p in gang if p.name in due]
    nodes = {w.node for w in placement.workers if current[w.rank] in stuck}
    refused = stuck[0].refusal
    state = "unschedulable" if refused is None or refused.node_bound else f"not bound ({refused})"
    message = f"{stuck[0].name} {state} for {timeout:g}s on {', '.join(sorted(nodes))}"
    return _replan(s, gang, "PlacementTimedOut", message, frozenset(nodes), "; planning again elsewhere")


def _replan(
    s: _Step, gang: Sequence[PodFacts], reason: str, message: str, avoid: frozenset[str], tail: str = ""
) -> JobStep:
    """The plan cannot be carried out: take the gang (and its claims) down and plan again; no restart counted."""
    s.delete(gang, 0)
    s.delete_claims()
    s.clear_placement()
    s.status.phase = JobPhase.PENDING if not s.status.restarts else JobPhase.RESCHEDULING
    s.condition(PLACED, False, reason, message)
    s.out.actions.event("Warning", reason, message + (tail or "; planning again"))
    s.out.avoid_nodes = avoid
    return _done(s)


def _blocked_claims(s: _Step, placement: PlacementStatus, current: dict[int, PodFacts]) -> list[str]:
    """Why planned devices of ranks not yet bound can never be allocated: taken by a claim that is not the
    job's own, withdrawn from the driver's ResourceSlice, or tainted. Empty when every rank can still go."""
    dra = s.view.dra
    if dra is None:
        return []
    claims = {c.name: c for c in s.claims if c.owner_uid == s.job.uid}
    devices, holders = dra.by_uuid(), dra.holders()
    reasons = []
    for worker in placement.workers:
        pod = current.get(worker.rank)
        name = claim_name(s.job.name, worker.rank, placement.generation)
        mine = claims.get(name)
        if (pod is not None and pod.node) or (mine is not None and mine.allocated):
            continue
        facts = s.view.topologies.get(worker.node)
        topology = facts.topology if facts is not None else None
        for gpu in worker.gpus:
            uuid = topology.gpus[gpu].uuid if topology is not None and gpu < topology.gpu_count else ""
            device = devices.get((worker.node, uuid)) if uuid else None
            where = f"GPU {gpu} of {worker.node} (rank {worker.rank})"
            if device is None:
                reasons.append(f"{where} is not published by the DRA driver")
                continue
            if device.tainted:
                reasons.append(f"{where} is tainted in its ResourceSlice")
                continue
            holder = holders.get(device.ref)
            if holder is not None and holder.owner_uid != s.job.uid:
                reasons.append(f"{where} is allocated to ResourceClaim {holder.namespace}/{holder.name}")
    return reasons


def _follow_reality(s: _Step, placement: PlacementStatus, current: dict[int, PodFacts]) -> None:
    """When the probe says a pod holds other GPUs than planned, the status follows the pod, and the
    ``GpusAsPlanned`` condition says so until the next placement; True once every rank is reported on its
    planned GPUs."""
    view, config = s.view, s.config
    changed: list[str] = []
    reported = 0
    workers = []
    for worker in placement.workers:
        pod = current.get(worker.rank)
        facts = view.topologies.get(pod.node) if pod and pod.node else None
        fresh = pod is not None and _fresh(s, view, pod)
        real = view.real_gpus(pod.namespace, pod.name, pod.node) if pod and fresh else None
        reported += bool(real)
        if real is not None and real and sorted(real) != sorted(worker.gpus):
            nics = list(worker.nics)
            topology = facts.topology if facts is not None else None
            if topology is not None and len(placement.workers) > 1 and all(g < topology.gpu_count for g in real):
                nics = [n.name for n in nearest_nics(topology, real)]
            changed.append(f"rank {worker.rank} on {worker.node} holds GPUs {list(real)}, planned {worker.gpus}")
            worker = worker.model_copy(update={"gpus": list(real), "nics": nics})
        workers.append(worker)
    if not changed:
        if reported == len(placement.workers) and not _gpus_differed(s):
            s.condition(
                GPUS_AS_PLANNED, True, "Reported", f"the probes report the planned GPUs of all {reported} ranks"
            )
        return
    update: dict[str, object] = {"workers": workers}
    estimate = estimate_workers(workers, view.topologies, view.nodes, config.tiers)
    if estimate is not None:
        update["estimated_bus_bandwidth_g_bps"] = round(estimate.busbw_gbps, 3)
        update["bottleneck"] = estimate.bottleneck
    s.status.placement = placement.model_copy(update=update)
    plugin = config.gpu_allocation is GpuAllocation.DEVICE_PLUGIN
    reason = "DevicePluginChoseOtherGpus" if plugin else "AllocatedOtherGpus"
    who = "the device plugin gave" if plugin else "the allocation gave"
    s.condition(GPUS_AS_PLANNED, False, reason, f"generation {placement.generation}: {who} " + "; ".join(changed))
    s.out.actions.event("Normal", "GpusDiffer", "reality wins: " + "; ".join(changed))


def _fresh(s: _Step, view: ClusterView, pod: PodFacts) -> bool:
    """Whether the probe's report of the pod is about this pod. Pods reuse names across generations, and an
    older report is about the previous pod of the same name: believe a list first published a second past
    the binding (the API server keeps condition times in whole seconds). A list first published within the
    binding's second is believed once the probe publishes it again a second past the binding: the previous
    pod of that name was gone before this one was created. Until then the step looks again shortly."""
    if not pod.node or pod.scheduled_at is None:
        return False
    since = view.real_since(pod.namespace, pod.name, pod.node)
    if since is None or since < pod.scheduled_at:
        return False
    settled = pod.scheduled_at + _API_TIME_RESOLUTION
    if since >= settled:
        return True
    seen = view.seen_at(pod.node)
    if seen is not None and seen >= settled:
        return True
    s.out.wake(s.now + _REPORT_RECHECK)
    return False


def _gpus_differed(s: _Step) -> bool:
    """Whether this placement generation's GPUs were found to differ (settle resets it for each new one)."""
    return any(c.type == GPUS_AS_PLANNED and c.status == "False" for c in s.status.conditions)


def _with_faults(s: _Step, spec: TrainingJobSpec, placement: PlacementStatus) -> JobStep:
    status, out, now, view, config = s.status, s.out, s.now, s.view, s.config
    workers = (status.placement or placement).workers
    faults, recheck = faults_under(workers, view.topologies, view.nodes, now, config.not_ready_grace)
    if recheck is not None:
        out.wake(recheck)

    verdict = decide(
        faults,
        spec.failure_policy,
        spec.topology.min_bus_bandwidth_g_bps,
        status.restarts,
        status.last_restart_time,
        now,
        lambda: estimate_workers(workers, view.topologies, view.nodes, config.tiers),
    )
    if verdict.action is Action.NONE:
        if s.is_true(DEGRADED):
            s.condition(DEGRADED, False, "Recovered", "every part under the gang works")
            recovered = estimate_workers(workers, view.topologies, view.nodes, config.tiers)
            if recovered is not None and status.placement is not None:
                status.placement.estimated_bus_bandwidth_g_bps = round(recovered.busbw_gbps, 3)
                status.placement.bottleneck = recovered.bottleneck
            out.actions.event("Normal", "Recovered", "every part under the gang works again")
        return _done(s)
    if verdict.action is Action.TOLERATE:
        if s.condition(DEGRADED, True, verdict.reason, verdict.message):
            out.actions.event("Warning", "Tolerated", verdict.message)
        if verdict.estimate is not None and status.placement is not None:
            status.placement.estimated_bus_bandwidth_g_bps = round(verdict.estimate.busbw_gbps, 3)
            status.placement.bottleneck = verdict.estimate.bottleneck
        return _done(s)
    if verdict.action is Action.WAIT:
        if s.condition(DEGRADED, True, verdict.reason, verdict.message):
            out.actions.event("Warning", verdict.reason, verdict.message)
        if verdict.not_before is not None:
            out.wake(verdict.not_before)
        return _done(s)
    pods = [p for p in s.ours if p.holds_gpus]
    if verdict.action is Action.FAIL:
        s.delete(pods, spec.failure_policy.grace_period_seconds)
        s.finish(JobPhase.FAILED, verdict.reason, verdict.message)
        return _done(s)
    if s.is_true(DEGRADED):
        s.condition(DEGRADED, False, "Rescheduled", "the gang is being re-placed")
    return _reschedule(
        s, spec, pods, verdict.grace_seconds, verdict.reason, f"re-placing after {verdict.reason}", verdict.message
    )


def _restart(s: _Step, spec: TrainingJobSpec, reason: str, message: str, current: dict[int, PodFacts]) -> JobStep:
    status = s.status
    gang = list(current.values())
    policy = spec.failure_policy
    if status.restarts >= policy.max_restarts:
        s.delete(gang, policy.grace_period_seconds)
        s.finish(JobPhase.FAILED, reason, f"{message}; maxRestarts {policy.max_restarts} reached")
        return _done(s)
    return _reschedule(s, spec, gang, _grace_for(gang, s.view, spec), reason, reason, message, verb="restarting")


def _reschedule(
    s: _Step,
    spec: TrainingJobSpec,
    pods: Sequence[PodFacts],
    grace: int,
    reason: str,
    why: str,
    message: str,
    verb: str = "re-placing",
) -> JobStep:
    """Take the gang down and queue the job again; the restart is recorded before the pods are touched,
    so it is counted exactly once."""
    status, out = s.status, s.out
    s.delete(pods, grace)
    status.restarts += 1
    status.last_restart_time = s.now
    status.phase = JobPhase.RESCHEDULING
    s.clear_placement()
    s.condition(PLACED, False, "Rescheduling", f"{why}: {message}")
    out.actions.event("Warning", reason, f"{verb} the gang (restart {status.restarts}): {message}")
    out.restart = Restart(reason)
    out.old_pods_left = True
    return _unplaced(s, spec)


def _create_gang(
    s: _Step, spec: TrainingJobSpec, placement: PlacementStatus, workers: Sequence[WorkerPlacement]
) -> None:
    """The gang's headless Service and the pods of these workers (pinned to their nodes; a one-worker job has no
    Service); in DRA mode each pod's ResourceClaim too, naming the planned GPUs by UUID."""
    job = s.job
    dra = s.config.gpu_allocation is GpuAllocation.DRA
    if is_gang(spec):
        s.out.actions.service = service_manifest(job.name, job.namespace, job.uid, spec)
    for worker in workers:
        claim = None
        if dra:
            claim = claim_name(job.name, worker.rank, placement.generation)
            s.out.actions.claims.append(
                claim_manifest(
                    job.name,
                    job.namespace,
                    owner_reference(job.name, job.uid),
                    worker.rank,
                    placement.generation,
                    _uuids(s, worker),
                )
            )
        s.out.actions.pods.append(pod_manifest(job.name, job.namespace, job.uid, spec, placement, worker, claim))


def _uuids(s: _Step, worker: WorkerPlacement) -> list[str]:
    """The planned GPUs' UUIDs as the node's probe reports them; a GPU without one keeps its index as a
    stand-in that matches no device, so the claim cannot be allocated and the job is planned again."""
    facts = s.view.topologies.get(worker.node)
    topology = facts.topology if facts is not None else None
    known = {g.index: g.uuid for g in topology.gpus if g.uuid} if topology is not None else {}
    return [known.get(g, f"GPU-unknown-{g}") for g in worker.gpus]


def _admission_said(actions: JobActions) -> str:
    """The words of the step's KueueAdmitted Event, taken out of ``actions`` to go in the Placed Event: a job
    placed as soon as Kueue admits it gets one Event for both (one write less per job)."""
    said = [e for e in actions.events if e.reason == KUEUE_ADMITTED]
    if not said:
        return ""
    actions.events = [e for e in actions.events if e.reason != KUEUE_ADMITTED]
    return f" ({said[-1].message})"


def settle(
    job: JobFacts,
    out: JobStep,
    result: Placement | Unplaceable,
    now: datetime,
    view: ClusterView,
    config: Config,
) -> PlannedGang | None:
    """The queue's answer for a job that wanted placement, applied to its step.

    Unplaceable: ``Placed=False`` with the reason (an event when the message changes). Placed: the new
    generation in the status, ``Placed=True`` and an event, and the gang's Service and pods unless the old
    gang is still terminating (they are created once it is gone); the plan to hold is returned.
    """
    s = _Step(job, now, view, config, out)
    status = s.status
    if not isinstance(result, Placement) and status.nomination is not None:
        victims = ", ".join(status.nomination.victims) or "its victims"
        s.condition(PLACED, False, "Preempting", f"waiting for {victims} to end: their GPUs are held for this job")
        return None
    if not isinstance(result, Placement):
        message = str(result)
        reason = "Unplaceable" if not status.restarts else "WaitingForCapacity"
        before = next((c.message for c in status.conditions if c.type == PLACED), None)
        s.condition(PLACED, False, reason, message)
        if before != message[:1024]:
            out.actions.event("Normal", reason, message)
        return None
    spec = job.spec
    assert spec is not None  # only a job with a spec is queued
    generation = (status.placement.generation if status.placement else 0) + 1
    placement = status.placement = result.to_api(generation=generation)
    status.phase = JobPhase.RESCHEDULING if out.old_pods_left else JobPhase.PLACING
    status.start_time = status.start_time or now
    nodes = sorted({w.node for w in placement.workers})
    message = (
        f"{len(placement.workers)} workers on {', '.join(nodes[:8])}{' …' if len(nodes) > 8 else ''}: "
        f"estimated bus bandwidth {placement.estimated_bus_bandwidth_g_bps:.1f} GB/s, "
        f"bottleneck {placement.bottleneck}"
    )
    s.condition(PLACED, True, "Placed", message)
    status.nomination = None
    if s.is_true(PREEMPTED):
        s.condition(PREEMPTED, False, "PlacedAgain", f"placed again as generation {placement.generation}")
    s.condition(
        GPUS_AS_PLANNED, None, "AwaitingReport", f"generation {placement.generation} is not yet reported by the probes"
    )
    admitted = _admission_said(out.actions)
    out.actions.event("Normal", "Placed", f"generation {placement.generation}{admitted}: {message}")
    if not out.old_pods_left:
        _create_gang(s, spec, placement, placement.workers)
    return PlannedGang(job.key, placement.generation, tuple((w.node, tuple(w.gpus)) for w in placement.workers), now)


def nominate(
    job: JobFacts,
    out: JobStep,
    nomination: NominationStatus,
    message: str,
    now: datetime,
    view: ClusterView,
    config: Config,
) -> None:
    """Record the nomination of a job that preempts: the GPUs held for it and the victims named, ``Placed=False``
    with reason ``Preempting`` and an Event. The victims are ended once this status is read back."""
    s = _Step(job, now, view, config, out)
    s.status.nomination = nomination
    s.condition(PLACED, False, "Preempting", message)
    out.actions.event("Normal", "Preempting", message)


def wait_for_checkpoint(
    job: JobFacts,
    out: JobStep,
    head: str,
    message: str,
    now: datetime,
    view: ClusterView,
    config: Config,
) -> None:
    """A job that waits for its victims' next checkpoint rather than preempt them now: ``Placed=False`` with reason
    ``WaitingForCheckpoint`` and ``message``, and an Event when it starts to wait (or waits for another checkpoint),
    not one per pass. ``head`` says which checkpoint (its time and the victims): while the job's status already
    says a wait of the same ``head``, its message is kept (the seconds and GPU-hours in ``message`` change every
    pass, and so the status would). The queue's Event that the job could not be placed this pass is dropped: the
    wait is why."""
    s = _Step(job, now, view, config, out)
    before = next((c for c in job.status.conditions if c.type == PLACED), None)
    same = (
        before is not None
        and (before.status, before.reason) == ("False", WAITING_FOR_CHECKPOINT)
        and before.message.startswith(head[:_MESSAGE_LIMIT])
    )
    s.condition(PLACED, False, WAITING_FOR_CHECKPOINT, before.message if same and before is not None else message)
    out.actions.events = [e for e in out.actions.events if e.reason not in _UNPLACED_EVENTS]
    if not same:
        out.actions.event("Normal", WAITING_FOR_CHECKPOINT, message)


def preempt(
    job: JobFacts,
    out: JobStep,
    pods: Sequence[PodFacts],
    now: datetime,
    view: ClusterView,
    config: Config,
    by: str,
    message: str,
) -> bool:
    """End the job's gang for the higher-priority gang ``by``, as a victim is ended: its pods deleted with the job's
    grace period (its time to checkpoint), its plan given up, and the job queued again with ``Preempted=True``
    naming the preemptor. Its restart budget is not charged. False when the job holds no plan to give up."""
    s = _Step(job, now, view, config, out)
    status = s.status
    if _placed(status) is None or job.spec is None or job.status.phase in TERMINAL:
        return False
    ours = [p for p in pods if p.owner_uid == job.uid]
    s.delete(ours, _grace_for(ours, view, job.spec))
    before = status.preemption or PreemptionStatus()
    by_now = [*(b for b in before.preempted_by if b != by), by][-MAX_NAMED:]
    status.preemption = PreemptionStatus(count=before.count + 1, last_preempted_at=now, preempted_by=by_now)
    s.clear_placement()
    status.phase = JobPhase.RESCHEDULING if status.restarts else JobPhase.PENDING
    s.condition(PREEMPTED, True, "Preempted", message)
    s.condition(PLACED, False, "Preempted", message)
    out.actions.event("Warning", "Preempted", message)
    out.old_pods_left = True
    out.wants_placement = False  # queued again by the next pass, behind its preemptor's nomination
    return True


def unreadable(job: JobFacts, now: datetime, error: Exception, view: ClusterView, config: Config) -> JobStep:
    """The step of a job whose spec tripped the operator: Invalid, naming what failed, and nothing else done,
    so one job the operator cannot read never stops the pass for the others."""
    s = _Step(job, now, view, config)
    message = f"gputopo could not read this job ({type(error).__name__}: {error}); fix the spec"
    if s.condition(INVALID, True, "InvalidSpec", message):
        s.out.actions.event("Warning", "InvalidSpec", message)
    return _done(s)


def _done(s: _Step) -> JobStep:
    s.status.observed_generation = s.job.generation
    return s.out
