"""One pass's step of one gang gputopo does not own: from its pods and its record to what to do (pure).

The gang is planned whole as soon as its size is known and its first pod waits on gputopo's gate alone; the plan
is recorded before any pod is steered, and held for ranks whose pods do not exist yet. Each pod waiting on the
gate alone is then pinned to its rank's node and GPUs and let go (kube-scheduler binds it; a PodGroup's gang
plugin keeps binding all or nothing). Pods held by another scheduler's gate (Kueue's) are left alone until that
gate is gone. A fault under a placed gang evicts its pods (all of them, or those on the fault when the gang may
be disrupted one pod at a time) through the Eviction API, so their owner makes them again, gated, and they are
placed off the fault. Pods nobody makes again (a gang of bare pods) are reported, not evicted, unless the gang
says otherwise. A plan whose ranks do not all arrive within ``arrival_timeout`` is let go, naming the ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from gputopo.api.preemption import MAX_NAMED, PreemptionStatus
from gputopo.api.trainingjob import WorkerPlacement
from gputopo.control import gangunbound as unbound
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import JobKey
from gputopo.control.failure import Fault, faults_under
from gputopo.control.gangactions import Eviction, GangActions, Involved, PodPatch
from gputopo.control.gangdra import Pinned, Unpinned, Waiting, pin_claims
from gputopo.control.gangnotes import with_disagreements, without_disagreements
from gputopo.control.gangrecords import GangRecord, RankPlan, record_body, record_name, status_of
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang, Member
from gputopo.gangs.steer import NotGatedError, release_patch, steer_patch
from gputopo.placement.types import Placement, Unplaceable

__all__ = ["GangStep", "Phase", "Pin", "involved", "pinner", "preempt", "settle", "step", "wait_for_checkpoint"]

_MESSAGE_LIMIT = 4096  # the GangPlacement's status.message

# In DRA mode: from a gated pod's body, its planned node and GPUs, the allocations of its claims (``gangdra``).
Pin = Callable[[Mapping[str, Any], str, tuple[int, ...]], Pinned | Waiting | Unpinned]


class Phase:
    PENDING = "Pending"
    PLANNED = "Planned"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    UNPLACEABLE = "Unplaceable"
    REFUSED = "Refused"
    RELEASED = "Released"
    PREEMPTED = "Preempted"
    PLACED_BY_KUEUE = "PlacedByKueue"


@dataclass
class GangStep:
    actions: GangActions
    record: GangRecord  # the record after this step
    wants_ranks: tuple[int, ...] = ()  # GPU ranks to plan now
    avoid_nodes: frozenset[str] = frozenset()
    wake_at: datetime | None = None
    restarted: str | None = None  # the reason, when this step evicted the gang's pods
    written: dict[str, Any] | None = field(default=None, repr=False)  # the status as it stands
    pin: Pin | None = field(default=None, repr=False)  # DRA mode: how a pod's claims get its planned GPUs

    @property
    def wants_placement(self) -> bool:
        return bool(self.wants_ranks)


def involved(gang: Gang) -> Involved:
    """Whom the gang's Events are about: its owner, or its first pod."""
    if gang.owner is not None:
        o = gang.owner
        return Involved(o.api_version, o.kind, o.name, o.uid)
    first = min(gang.members, key=lambda m: m.rank, default=None)
    return Involved("v1", "Pod", first.pod if first else gang.id.name, first.uid if first else "")


def _live(gang: Gang) -> dict[int, Member]:
    return {r: m for r, m in gang.by_rank.items() if not m.deleting and m.phase not in ("Succeeded", "Failed")}


def _shape(gang: Gang, rank: int) -> int:
    declared = gang.declared
    if declared is not None and rank < len(declared.shape):
        return declared.shape[rank]
    member = gang.by_rank.get(rank)
    return member.gpus if member is not None else 0


def pinner(view: ClusterView, config: Config, now: datetime) -> Pin | None:
    """In DRA mode, how a pod's template claims are given its planned GPUs (None in device-plugin mode)."""
    dra = view.dra
    if config.gpu_allocation is not GpuAllocation.DRA or dra is None:
        return None

    def pin(body: Mapping[str, Any], node: str, gpus: tuple[int, ...]) -> Pinned | Waiting | Unpinned:
        facts = view.topologies.get(node)
        uuids = {g.index: g.uuid for g in facts.topology.gpus} if facts is not None and facts.topology else {}
        return pin_claims(body, node, gpus, uuids, dra, now)

    return pin


def _steer(
    gang: Gang, record: GangRecord, bodies: Mapping[str, Mapping[str, Any]], pin: Pin | None, actions: GangActions
) -> list[str]:
    """Steer each pod waiting on gputopo's gate alone into its rank's plan (in DRA mode, its claims allocated the
    planned GPUs first); let a 0-GPU rank go unpinned. Returns why pods were held back (claims not ready)."""
    patches: list[PodPatch] = []
    waiting: list[str] = []
    plan = record.plan
    for rank, member in sorted(_live(gang).items()):
        body = bodies.get(member.uid)
        if not member.gated or member.held_elsewhere or body is None:
            continue
        try:
            if rank in plan:
                p = plan[rank]
                pinned = pin(body, p.node, p.gpus) if pin is not None and p.gpus else None
                if isinstance(pinned, Waiting):
                    waiting.append(pinned.reason)
                    continue
                ops = steer_patch(body, p.node, p.gpus, record.generation, gang.id)
                if isinstance(pinned, Pinned):
                    actions.claims.extend(pinned.writes)
                elif isinstance(pinned, Unpinned):
                    why = f"rank {rank} (pod {member.pod}) goes to {p.node}, but kube-scheduler picks its GPUs there: "
                    actions.event(involved(gang), "Warning", "GangClaimNotPinned", why + pinned.reason)
            elif _shape(gang, rank) == 0:
                ops = release_patch(body, gang.id)
            else:
                continue  # its rank is not planned yet
        except NotGatedError:
            continue  # the body read says otherwise than the gates read: the next read decides
        patches.append(PodPatch(member.pod, member.uid, tuple(ops)))
    actions.patches = patches
    return waiting


def _with_pods(record: GangRecord, gang: Gang) -> GangRecord:
    live = _live(gang)
    ranks = tuple(replace(p, pod=live[p.rank].pod) if p.rank in live else p for p in record.ranks)
    return replace(record, ranks=ranks)


def _faults(
    record: GangRecord, view: ClusterView, config: Config, now: datetime
) -> tuple[list[Fault], datetime | None]:
    workers = [WorkerPlacement(rank=p.rank, node=p.node, gpus=list(p.gpus), nics=list(p.nics)) for p in record.ranks]
    return faults_under(workers, view.topologies, view.nodes, now, config.not_ready_grace)


def step(
    gang: Gang,
    record: GangRecord | None,
    bodies: Mapping[str, Mapping[str, Any]],
    view: ClusterView,
    config: Config,
    now: datetime,
    arrival_timeout: float,
    wait: str | None = None,  # why it may not be planned yet (``phantoms``): it stays Pending, saying so
) -> GangStep:
    """What to do for ``gang`` now; ``bodies`` are its pods' bodies by uid (a patch is built from the pod). A pod of
    the gang exists, so a record stamped when none was left (``gangretention``) loses the stamp: it is kept."""
    key = JobKey(gang.id.key)
    before = replace(record, pods_gone_at=None) if record is not None else GangRecord(key, record_name(gang.id))
    actions = GangActions(key, gang.id.namespace, before.name, record=record_body(gang) if record is None else None)
    result = _decide(gang, before, bodies, view, config, now, (arrival_timeout, wait), actions)
    result.pin = pinner(view, config, now)  # for ``settle``
    plain = _with_pods(result.record, gang)
    result.record, news = with_disagreements(gang, before, plain)
    if news:
        actions.event(involved(gang), "Warning", "GangSourcesDisagree", news)
    status = status_of(result.record)
    if record is None or status != status_of(record):
        actions.status = status
    _announce(gang, without_disagreements(gang, before), plain, actions)
    return result


def _decide(
    gang: Gang,
    rec: GangRecord,
    bodies: Mapping[str, Mapping[str, Any]],
    view: ClusterView,
    config: Config,
    now: datetime,
    timeout_wait: tuple[float, str | None],
    actions: GangActions,
) -> GangStep:
    (arrival_timeout, wait), pin = timeout_wait, pinner(view, config, now)
    if (kueue := _left_to_kueue(gang, rec, bodies, actions)) is not None:
        return kueue
    if gang.problems:
        message = "; ".join(gang.problems)
        return GangStep(actions, replace(rec, phase=Phase.REFUSED, message=message, ranks=(), missing=()))
    declared = gang.declared
    if declared is None:
        why = "its size is not known yet (its owner is not read yet, or does not say)"
        return GangStep(actions, replace(rec, phase=Phase.PENDING, message=why))
    live = _live(gang)
    if rec.ranks and rec.phase != Phase.RELEASED and not live and _going_under_kueue(gang):
        return GangStep(actions, _stopped_by_kueue(gang, rec))
    if _ended(gang):
        # Where it ran stays on record; a Released record holds no GPUs.
        return GangStep(actions, replace(rec, phase=Phase.RELEASED, message="every pod of the gang has ended"))
    if rec.phase == Phase.RELEASED:
        rec = replace(rec, ranks=())
    if rec.ranks:
        faults, recheck = _faults(rec, view, config, now)
        if faults:
            return _fault(gang, rec, faults, actions)
        return _held(gang, rec, bodies, now, (arrival_timeout, config.unschedulable_timeout), actions, recheck, pin)
    if not live:
        if rec.phase in (Phase.RESTARTING, Phase.RELEASED, Phase.PREEMPTED):
            return GangStep(actions, rec)  # evicted (their owner makes them again), or ended
        return GangStep(actions, replace(rec, phase=Phase.PENDING, message="no pod of the gang exists", missing=()))
    if (stay := _evict_again(gang, rec, actions)) is not None:
        return stay
    if rec.phase == Phase.RELEASED and rec.released_with == len(live):
        return GangStep(actions, rec)  # the same pods as when the plan was let go: wait for the rest
    if held := sorted({g for m in live.values() for g in m.held_elsewhere}):
        why = f"waiting for {', '.join(held)} to be removed before planning"
        return GangStep(actions, replace(rec, phase=Phase.PENDING, message=why))
    _steer(gang, rec, bodies, pin, actions)  # 0-GPU ranks go at once
    if wait is not None:
        return GangStep(actions, replace(rec, phase=Phase.PENDING, message=wait, missing=gang.missing()))
    return GangStep(actions, rec, wants_ranks=declared.gpu_ranks)


def _left_to_kueue(
    gang: Gang, rec: GangRecord, bodies: Mapping[str, Mapping[str, Any]], actions: GangActions
) -> GangStep | None:
    """A gang Kueue admitted on a flavor with a topology: Kueue's Topology-Aware Scheduling places its pods. gputopo
    lifts its own gate from each (marking the pod the gang's, so the record stays) and plans and holds nothing: no
    node affinity, no GPU plan, no GPUs in the ledger. None for a gang that is not Kueue's to place."""
    tas = [m for m in _live(gang).values() if m.placed_by_kueue]
    if not tas:
        return None
    patches: list[PodPatch] = []
    for member in tas:
        body = bodies.get(member.uid)
        if not member.gated or body is None:
            continue
        try:
            ops = release_patch(body, gang.id)
        except NotGatedError:
            continue  # the body read says otherwise than the gates read: the next read decides
        patches.append(PodPatch(member.pod, member.uid, tuple(ops)))
    actions.patches = patches
    workloads = sorted({m.kueue_workload for m in tas if m.kueue_workload})
    named = f" (Workload {', '.join(workloads)})" if workloads else ""
    why = (
        f"Kueue admitted it on a flavor with a topology{named}: Kueue's Topology-Aware Scheduling places its pods, "
        "gputopo plans no GPUs for it"
    )
    return GangStep(actions, replace(rec, phase=Phase.PLACED_BY_KUEUE, message=why, ranks=(), missing=()))


def _going_under_kueue(gang: Gang) -> bool:
    """A gang of a Kueue workload with a pod being deleted (with no live pod, every pod is going or has ended; a
    gang whose pods only ended keeps its plan for ranks still to come). A deleted pod may read Failed already: the
    pod garbage collector fails terminating pods that were never bound."""
    return any(m.kueue_workload is not None for m in gang.members) and any(m.deleting for m in gang.members)


def _stopped_by_kueue(gang: Gang, rec: GangRecord) -> GangRecord:
    """A gang of a Kueue workload whose pods are all going while its plan holds GPUs: Kueue stopped the workload
    (evicted it for a preemptor, or it was deactivated; its Job suspended deletes the pods), or its pods were
    deleted. The plan is let go at once, not after the pods' grace periods; the pods made again when Kueue admits
    it again are planned afresh."""
    workloads = sorted({m.kueue_workload for m in gang.members if m.kueue_workload})
    named = f" {', '.join(workloads)}" if workloads else ""
    why = (
        f"every pod of Kueue's workload{named} is going (Kueue evicted or deactivated it, or its pods were "
        "deleted): its GPUs are let go; it is planned again when its pods come back"
    )
    return replace(rec, phase=Phase.RELEASED, message=why, ranks=(), missing=(), released_with=None)


def _ended(gang: Gang) -> bool:
    """Every rank of the gang has had its pod, and every pod has ended. A rank whose pod is still to come keeps
    the plan (a JobSet's first Job may finish before its second is made)."""
    declared = gang.declared
    ranks = {m.rank for m in gang.members}
    whole = declared is None or all(r in ranks for r in declared.gpu_ranks)
    return bool(gang.members) and whole and all(m.phase in ("Succeeded", "Failed") for m in gang.members)


def _held(
    gang: Gang,
    rec: GangRecord,
    bodies: Mapping[str, Mapping[str, Any]],
    now: datetime,
    timeouts: tuple[float, float],
    actions: GangActions,
    recheck: datetime | None,
    pin: Pin | None,
) -> GangStep:
    """A gang whose plan is held: ``timeouts`` are how long its ranks may take to arrive, and to be bound."""
    arrival_timeout, unschedulable_timeout = timeouts
    declared = gang.declared
    assert declared is not None
    live = _live(gang)
    plan = rec.plan
    unplanned = tuple(r for r in declared.gpu_ranks if r not in plan)
    missing = gang.missing()
    if missing and rec.planned_at is not None and now - rec.planned_at >= timedelta(seconds=arrival_timeout):
        names = ", ".join(map(str, missing))
        why = f"ranks {names} did not arrive within {int(arrival_timeout)}s of the plan: its GPUs are let go"
        released = replace(rec, phase=Phase.RELEASED, message=why, ranks=(), missing=missing, released_with=len(live))
        return GangStep(actions, released)
    refused = unbound.refused(gang, rec)
    late, wake = unbound.overdue(refused, rec, now, unschedulable_timeout)
    if late:
        return _give_up(gang, rec, unbound.give_up(gang, rec, late, unschedulable_timeout), actions, len(live))
    waiting = _steer(gang, rec, bodies, pin, actions)
    wake = recheck if wake is None else min(wake, recheck or wake)
    if missing and rec.planned_at is not None:
        due = rec.planned_at + timedelta(seconds=arrival_timeout)
        wake = due if wake is None else min(wake, due)
    bound = all(live.get(r) is not None and live[r].node for r in declared.gpu_ranks)
    if unplanned:
        phase, why = Phase.RESTARTING if rec.restarts else Phase.PLANNED, f"planning ranks {_list(unplanned)}"
    elif bound and not missing:
        phase, why = Phase.RUNNING, ""
    else:
        phase, why = Phase.PLANNED, _planned_message(missing, waiting, unbound.waiting_words(refused, gang))
    waiting_for = tuple(r for r in unplanned if r in live and live[r].gated)
    if rec.phase == Phase.RESTARTING:
        for rank in unplanned:
            if rank in live and not live[rank].gated:  # its eviction did not go through yet
                actions.evictions.append(Eviction(live[rank].pod, live[rank].uid))
    record = replace(rec, phase=phase, message=why, missing=missing)
    return GangStep(actions, record, wants_ranks=waiting_for, wake_at=wake)


def _give_up(gang: Gang, rec: GangRecord, given: unbound.GivenUp, actions: GangActions, live: int) -> GangStep:
    """Ranks kube-scheduler would not bind: evict their pods and plan them again off those nodes, or let the plan go
    (``gangunbound``)."""
    if given.release:
        actions.event(involved(gang), "Warning", "GangNotBound", given.message)
        released = replace(rec, phase=Phase.RELEASED, message=given.message, ranks=(), released_with=live)
        return GangStep(actions, released)
    if not given.evict:
        return GangStep(actions, replace(rec, message=given.message))
    actions.evictions.extend(Eviction(m.pod, m.uid) for m in given.evict)
    actions.event(involved(gang), "Warning", "PlacementTimedOut", given.message)
    kept = tuple(p for p in rec.ranks if p.rank not in given.ranks)
    record = replace(rec, ranks=kept, phase=Phase.PLANNED, message=given.message)
    return GangStep(actions, record, avoid_nodes=given.avoid)


def _evict_again(gang: Gang, rec: GangRecord, actions: GangActions) -> GangStep | None:
    """A restarting or preempted gang whose evicted pods still run (a PodDisruptionBudget held them, or the operator
    stopped before it evicted them all): evict them again and plan nothing until they are gone."""
    if rec.phase not in (Phase.RESTARTING, Phase.PREEMPTED):
        return None
    running = [m for m in _live(gang).values() if not m.gated and not m.bystander]
    if not running:
        return None
    actions.evictions.extend(Eviction(m.pod, m.uid) for m in running)
    return GangStep(actions, rec, wake_at=None)


def _list(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))


def _planned_message(missing: tuple[int, ...], waiting: list[str], refused: str = "") -> str:
    """What a planned gang whose ranks are not all bound waits for: its missing ranks' pods, the claims of its
    pods (``waiting``: why pods were held back), or kube-scheduler (``refused``: its words on the steered pods)."""
    if missing:
        return f"waiting for ranks {_list(missing)} to be created"
    return f"waiting: {waiting[0]}" if waiting else refused or "waiting for kube-scheduler to bind"


def _fault(gang: Gang, rec: GangRecord, faults: list[Fault], actions: GangActions) -> GangStep:
    """Evict the pods the faults hit (or all, by the gang's disruption mode) so their owner makes them again."""
    kinds = sorted({str(f.kind) for f in faults})
    detail = "; ".join(str(f) for f in faults)
    nodes = frozenset(f.node for f in faults)
    hit = {p.rank for p in rec.ranks if p.node in nodes}
    live = _live(gang)
    steered = {r: m for r, m in live.items() if not m.gated and not m.bystander}
    if not steered:  # nothing runs there yet: plan the gang again, off the fault
        return GangStep(actions, replace(rec, ranks=(), phase=Phase.PENDING, message=detail), avoid_nodes=nodes)
    if gang.owner is None and not gang.evict_bare:
        why = (
            f"fault under the gang ({detail}); its pods are bare (nobody would make them again), so they are not "
            'evicted: set the annotation gputopo.io/evict-bare-pods: "true" to have them evicted'
        )
        return GangStep(actions, replace(rec, message=why))
    everything = gang.disruption == "all"
    ranks = set(steered) if everything else hit
    for rank in sorted(ranks & set(steered)):
        member = steered[rank]
        actions.evictions.append(Eviction(member.pod, member.uid))
    kept = () if everything else tuple(p for p in rec.ranks if p.rank not in hit)
    reason = ",".join(kinds)
    record = replace(
        rec,
        ranks=kept,
        phase=Phase.RESTARTING,
        message=f"evicted ranks {_list(tuple(sorted(ranks)))}: {detail}",
        restarts=rec.restarts + 1,
        last_restart_reason=reason,
    )
    return GangStep(actions, record, avoid_nodes=nodes, restarted=reason)


def preempt(gang: Gang, done: GangStep, by: str, message: str, now: datetime) -> bool:
    """End the gang for the higher-priority gang ``by``: every pod that runs is evicted through the Eviction API
    (its own grace period, its PodDisruptionBudget) for its owner to make again, gated; the plan is given up and
    the gang waits, ``Preempted``, to be placed again. No restart is counted. False when it holds no plan."""
    rec = done.record
    if not rec.ranks:
        return False
    done.actions.evictions.extend(Eviction(m.pod, m.uid) for m in _live(gang).values() if not m.gated)
    before = rec.preemption or PreemptionStatus()
    by_now = [*(b for b in before.preempted_by if b != by), by][-MAX_NAMED:]
    record = replace(
        rec,
        ranks=(),
        phase=Phase.PREEMPTED,
        message=message,
        missing=(),
        preemption=PreemptionStatus(count=before.count + 1, last_preempted_at=now, preempted_by=by_now),
    )
    done.record = record
    done.wants_ranks = ()
    done.actions.status = status_of(record)
    done.actions.event(involved(gang), "Warning", "GangPreempted", message)
    return True


def wait_for_checkpoint(gang: Gang, done: GangStep, before: GangRecord | None, head: str, message: str) -> None:
    """The gang waits for its victims' next checkpoint rather than preempt them now: Pending with ``message``, and a
    ``WaitingForCheckpoint`` Event when it starts to wait (or waits for another checkpoint), not one per pass.
    ``before`` is its record as read: while it says a wait of the same ``head`` (the checkpoint's time and victims),
    its message is kept, and nothing is written. The queue's ``GangUnplaceable`` Event of this pass is dropped."""
    same = before is not None and before.phase == Phase.PENDING and before.message.startswith(head[:_MESSAGE_LIMIT])
    kept = before.message if same and before is not None else message[:_MESSAGE_LIMIT]
    record = replace(done.record, phase=Phase.PENDING, message=kept)
    done.record = record
    status = status_of(record)
    unchanged = before is not None and done.actions.record is None and status == status_of(before)
    done.actions.status = None if unchanged else status
    done.actions.events = [(a, e) for a, e in done.actions.events if e.reason != "GangUnplaceable"]
    if not same:
        done.actions.event(involved(gang), "Normal", "WaitingForCheckpoint", message)


def settle(
    gang: Gang,
    done: GangStep,
    result: Placement | Unplaceable,
    bodies: Mapping[str, Mapping[str, Any]],
    now: datetime,
) -> PlannedGang | None:
    """Apply the queue's answer for the ranks ``done`` asked for: the plan recorded and the pods steered into it,
    or the reason nothing fits. Returns the plan to hold in the ledger."""
    rec, actions = done.record, done.actions
    if isinstance(result, Unplaceable) and rec.nomination is not None:
        victims = ", ".join(rec.nomination.victims) or "its victims"
        record = replace(rec, phase=Phase.PENDING, message=f"waiting for {victims} to end: their GPUs are held for it")
        done.record = _rewrite(gang, rec, record, actions)
        return None
    if isinstance(result, Unplaceable):
        record = replace(rec, phase=Phase.UNPLACEABLE, message=result.reason)
        done.record = _rewrite(gang, rec, record, actions)
        return None
    new = {w.rank: RankPlan(w.rank, w.node, tuple(w.gpus), tuple(w.nics)) for w in result.workers}
    kept = tuple(p for p in rec.ranks if p.rank not in new)
    record = replace(
        rec,
        ranks=tuple(sorted((*kept, *new.values()), key=lambda p: p.rank)),
        generation=rec.generation + 1,
        planned_at=now,
        phase=Phase.PLANNED,
        message="",
        missing=gang.missing(),
        busbw_gbps=result.busbw_gbps,
        bottleneck=result.bottleneck,
        tier=result.tier,
        released_with=None,
        nomination=None,
    )
    record = _with_pods(record, gang)
    waiting = _steer(gang, record, bodies, done.pin, actions)
    # Recorded as the next step would say it while the ranks are bound: that step writes no status of its own.
    record = replace(record, message=_planned_message(record.missing, waiting))
    actions.placed = True
    record = done.record = _rewrite(gang, rec, record, actions)
    nodes = sorted({p.node for p in record.ranks})
    actions.event(
        involved(gang),
        "Normal",
        "GangPlaced",
        f"{gang.id.source} gang {gang.id.name}: {len(new)} ranks planned on {', '.join(nodes)}, "
        f"estimated bus bandwidth {result.busbw_gbps:.1f} GB/s ({result.bottleneck})",
    )
    return PlannedGang(done.actions.key, record.generation, tuple((p.node, p.gpus) for p in record.ranks), now)


def _rewrite(gang: Gang, before: GangRecord, after: GangRecord, actions: GangActions) -> GangRecord:
    plain = after
    after, news = with_disagreements(gang, before, after)
    if news:
        actions.event(involved(gang), "Warning", "GangSourcesDisagree", news)
    status = status_of(after)
    if actions.status is not None or status != status_of(before):
        actions.status = status
    was = without_disagreements(gang, before)
    if plain.phase == Phase.UNPLACEABLE and (was.phase, was.message) != (plain.phase, plain.message):
        actions.event(involved(gang), "Warning", "GangUnplaceable", plain.message)
    return after


_ANNOUNCED: dict[str, tuple[Literal["Normal", "Warning"], str]] = {
    Phase.REFUSED: ("Warning", "GangRefused"),
    Phase.RELEASED: ("Warning", "GangIncomplete"),
    Phase.RESTARTING: ("Warning", "GangRestarting"),
    Phase.RUNNING: ("Normal", "GangRunning"),
    Phase.PLACED_BY_KUEUE: ("Normal", "GangPlacedByKueue"),
}


def _announce(gang: Gang, before: GangRecord, after: GangRecord, actions: GangActions) -> None:
    """An Event on the owner when the gang's phase changes to one a user wants to hear of (or a fault that is
    only reported changes)."""
    changed = (before.phase, before.message) != (after.phase, after.message)
    if not changed:
        return
    if after.phase == Phase.RELEASED and (
        after.released_with is None or any(e.reason == "GangNotBound" for _, e in actions.events)
    ):
        return  # every pod ended (its job is done, or its evicted pods are being made again), or said already
    note = _ANNOUNCED.get(after.phase)
    if note is not None and (before.phase != after.phase or after.phase != Phase.RUNNING):
        if after.phase == Phase.RESTARTING and before.restarts == after.restarts:
            return  # still restarting: said when it started
        actions.event(involved(gang), note[0], note[1], after.message or f"all ranks of {gang.id.name} are bound")
    elif after.message.startswith("fault under the gang"):
        actions.event(involved(gang), "Warning", "GangFaultNotEvicted", after.message)
