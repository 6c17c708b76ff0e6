"""The runtime's part for the gangs gputopo places without owning them: what the gang watches hold, read into
the pass's ``GangInput``, and each gang's writes going out on a task of its own.

A gang whose writes are going out is busy: passes leave it alone until they are done (its new plan is in the
ledger meanwhile). The record a gang's writes left is used instead of the one the watch shows until the watch
shows it too (for ``FRESH_SECONDS`` at most), so a pass right after a write never plans the gang a second time;
what only the object read knows (its uid, resourceVersion and owner) is the watch's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions, Involved
from gputopo.control.gangpass import GangInput
from gputopo.control.gangrecords import GangRecord, record_facts
from gputopo.control.gangretention import DEFAULT_RETENTION_SECONDS
from gputopo.controller.gangwatches import GangWatches
from gputopo.controller.gangwriter import GangWritten, write_gang
from gputopo.controller.gate import PriorityGate
from gputopo.gangs.claimmemo import ClaimMemo
from gputopo.gangs.claims import Claim, Owners
from gputopo.gangs.model import Gang
from gputopo.gangs.planning import plan_gang, preemptor_shapes
from gputopo.gangs.read import MemberMemo, Refusal, read_gangs
from gputopo.gangs.steer import NotGatedError, release_patch
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError
from gputopo.placement.types import GpuChoice, Placement, Policy, Snapshot, TierConfig, Unplaceable

__all__ = ["FRESH_SECONDS", "GangSide", "left_by"]

logger = logging.getLogger("gputopo.controller")

FRESH_SECONDS = 30.0  # how long a record the operator wrote outranks an older one the watch still shows


def _same(a: GangRecord, b: GangRecord) -> bool:
    def shown(r: GangRecord) -> tuple[object, ...]:
        return (r.generation, r.restarts, r.phase, r.ranks, r.pods_gone_at)

    return shown(a) == shown(b)


@dataclass
class GangSide:
    client: KubeClient
    poke: Callable[[], None]
    arrival_timeout: float
    watches_namespace: Callable[[str], bool] = lambda _: True  # the namespaces the operator watches
    writing: dict[JobKey, asyncio.Task[None]] = field(default_factory=dict)
    # The record each gang's last writes left, and when (monotonic).
    written: dict[JobKey, tuple[GangRecord, float]] = field(default_factory=dict)
    told: set[tuple[str, str, str]] = field(default_factory=set)  # refusals already posted as Events
    events: set[asyncio.Task[None]] = field(default_factory=set)  # Events and gates lifted, going out
    # The members the last pass read: a pass reads again only the pods that changed since (``MemberMemo``).
    members: MemberMemo = field(default_factory=MemberMemo)
    # What each pod was claimed as: claimed again only when it, or an owner its claim looked up, changed.
    claims: ClaimMemo[Claim | Refusal | None] = field(default_factory=ClaimMemo)
    # Each GangPlacement body the last pass read, and its record: read again only once the watch has a new body.
    records_read: dict[int, tuple[Any, GangRecord | None]] = field(default_factory=dict)
    # News that cannot change a plan: a gang's writes that changed no pod are through (None: ``poke``).
    poke_soon: Callable[[], None] | None = None
    record_retention: float = DEFAULT_RETENTION_SECONDS  # a record of a gang with no owner, once its pods are gone
    planning_seconds: float = 1.0  # one gang's plan may take this long in a pass (``plan_gang``'s budget)
    placing: int = 0  # gangs whose new plans' writes are going out
    headroom: int = 0  # ranks with no pod a gang of bare pods may be planned for where no quota limits GPUs

    def read(
        self,
        watches: GangWatches,
        tiers: TierConfig,
        place: Policy,
        gpu_choice: GpuChoice,
        claim_templates: Mapping[tuple[str, str], int | str] | None = None,
        quota_room: Mapping[str, int] | None = None,
    ) -> GangInput:
        """The gangs as the watches show them now (pods refused are told once, as an Event on the pod);
        ``claim_templates``: in DRA mode, each ResourceClaimTemplate's GPU count; ``quota_room``: each namespace's
        room for more GPUs under its ResourceQuotas."""
        pods = [p for p in watches.pods.values() if self.watches_namespace(str(_meta(p).get("namespace", "")))]
        owners = Owners(
            podgroups=watches.pod_groups,
            jobs=watches.jobs,
            jobsets=watches.job_sets,
            leaderworkersets=watches.leader_worker_sets,
            pytorchjobs=watches.pytorch_jobs,
            claim_templates=claim_templates,
        )
        found = read_gangs(pods, owners, self.members, self.claims)
        self._tell(found.refused)
        self._let_go(found.unclaimed, watches)
        records: dict[JobKey, GangRecord] = {}
        read: dict[int, tuple[Any, GangRecord | None]] = {}
        for body in watches.gang_placements.values():
            kept = self.records_read.get(id(body))
            record = kept[1] if kept is not None and kept[0] is body else record_facts(body)
            read[id(body)] = (body, record)
            if record is not None and self.watches_namespace(record.key[0]):
                records[record.key] = self._freshest(record)
        self.records_read = read
        bodies: dict[str, Any] = {}
        for pod in pods:
            uid = _meta(pod).get("uid")
            if isinstance(uid, str) and uid:
                bodies[uid] = pod

        def planner(snapshot: Snapshot, gang: Gang) -> Placement | Unplaceable:
            ends = time.perf_counter() + self.planning_seconds
            plan = plan_gang(snapshot, gang, tiers, place, gpu_choice, lambda: time.perf_counter() > ends)
            return plan if isinstance(plan, Unplaceable) else plan.placement

        gangs = {JobKey(g.id.key): g for g in found.gangs}
        return GangInput(
            gangs,
            records,
            bodies,
            planner,
            self.arrival_timeout,
            requester=lambda gang: preemptor_shapes(gang, tiers, gpu_choice),
            record_retention=self.record_retention,
            quota_room=dict(quota_room or {}),
            headroom=self.headroom,
        )

    def _freshest(self, watched: GangRecord) -> GangRecord:
        mine = self.written.get(watched.key)
        if mine is None:
            return watched
        record, at = mine
        if _same(record, watched) or time.monotonic() - at > FRESH_SECONDS:
            del self.written[watched.key]
            return watched
        return replace(
            record,
            uid=watched.uid,
            name=watched.name,
            resource_version=watched.resource_version,
            owned=watched.owned,
        )

    def busy(self) -> Collection[JobKey]:
        return set(self.writing)

    def start(self, actions: GangActions, gate: PriorityGate | None) -> None:
        """Start one gang's writes without waiting for them."""
        task = asyncio.create_task(self._write(actions, left_by(actions), gate))
        self.writing[actions.key] = task
        if actions.placed:
            self.placing += 1

    async def _write(self, actions: GangActions, record: GangRecord | None, gate: PriorityGate | None) -> None:
        """The gang's writes; it is busy until they are through. Its Events go out after, while it is not."""
        through = False

        def written_before_events(written: GangWritten) -> None:
            nonlocal through
            through = True
            if written.status_written and record is not None:
                self.written[actions.key] = (record, time.monotonic())
            if written.deleted is not None:
                self.written.pop(actions.key, None)  # a record made again under its name starts afresh
            if written.error is not None or written.eviction_blocked:
                asyncio.get_running_loop().call_later(2.0, self.poke)  # try again soon
            # Members that came while the gang was busy wait for the next pass, unless every rank had its pod.
            whole = record is not None and not record.missing and not written.patch_failed
            self._not_busy(actions, urgent=written.error is not None or not whole)

        try:
            await write_gang(self.client, actions, gate=gate, written_before_events=written_before_events)
        except Exception:  # one gang's writes must not go unheard; the next pass steps it afresh
            logger.exception("writing gang %s/%s failed", *actions.key)
        finally:
            if not through:
                self._not_busy(actions, urgent=True)

    def _not_busy(self, actions: GangActions, urgent: bool) -> None:
        """The gang's writes are through: passes step it again; at once (``urgent``) when members of it may be
        waiting for that pass. What is left of its task (its Events) is kept among ``events`` until it is done."""
        task = asyncio.current_task()
        if task is not None and self.writing.get(actions.key) is task:
            del self.writing[actions.key]
            if actions.placed:
                self.placing -= 1
            self.events.add(task)
            task.add_done_callback(self.events.discard)
        (self.poke if urgent or self.poke_soon is None else self.poke_soon)()

    def _let_go(self, unclaimed: tuple[Refusal, ...], watches: GangWatches) -> None:
        """Lift gputopo's gate from gated pods no source makes a gang of (a user's gate on a pod of no gang):
        holding them would hold them forever."""
        for refusal in unclaimed:
            key = (refusal.namespace, refusal.pod, "unclaimed")
            body = watches.pods.get((refusal.namespace, refusal.pod))
            if key in self.told or body is None:
                continue
            try:
                ops = release_patch(body)
            except NotGatedError:
                continue
            self.told.add(key)
            uid = str(_meta(body).get("uid", ""))
            guarded = [{"op": "test", "path": "/metadata/uid", "value": uid}, *ops] if uid else ops
            self._spawn(self._release(refusal.namespace, refusal.pod, guarded, refusal.reason))

    async def _release(self, namespace: str, pod: str, ops: list[dict[str, Any]], why: str) -> None:
        try:
            if await self.client.patch_pod_json(namespace, pod, ops):
                logger.info("pod %s/%s let go unplaced: %s", namespace, pod, why)
        except ApiError as error:
            self.told.discard((namespace, pod, "unclaimed"))
            logger.warning("pod %s/%s: lifting gputopo's gate failed: %s", namespace, pod, error)

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self.events.add(task)
        task.add_done_callback(self.events.discard)

    def _tell(self, refused: tuple[Refusal, ...]) -> None:
        for refusal in refused:
            told = (refusal.namespace, refusal.pod, refusal.reason)
            if told in self.told:
                continue
            self.told.add(told)
            about = Involved("v1", "Pod", refusal.pod, "")
            self._spawn(self._event(refusal.namespace, about, refusal.reason))

    async def _event(self, namespace: str, about: Involved, message: str) -> None:
        try:
            await self.client.event_on(namespace, about, "Warning", "GangRefused", message)
        except ApiError as error:
            logger.debug("event on pod %s/%s not recorded: %s", namespace, about.name, error)


def _meta(body: Any) -> dict[str, Any]:
    meta = body.get("metadata") if isinstance(body, dict) else None
    return meta if isinstance(meta, dict) else {}


def left_by(actions: GangActions) -> GangRecord | None:
    """The record a gang's actions leave when they go through (None when they write no status)."""
    if actions.status is None:
        return None
    source, _, name = actions.key[1].partition("/")
    meta = {"name": actions.record_name, "namespace": actions.namespace}
    return record_facts({"metadata": meta, "spec": {"source": source, "gang": name}, "status": actions.status})
