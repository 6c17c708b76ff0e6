"""Carries out one foreign gang's actions against the API server, in order, and says what became of them; decides
nothing.

The record first (its GangPlacement created when absent, then its status), so no pod is steered into a plan that is
not recorded; then the evictions, through the Eviction API; then (DRA mode) the allocations of the pods' claims; then
the pods' patches; then the Events. A pod whose claim could not be written is not patched: it stays gated. A record that
cannot be written stops everything after it. An eviction a PodDisruptionBudget refuses, or one that fails, stops
the patches (the pods they steer may need the GPUs the evicted pods hold): the next pass decides again. A patch
refused because its pod changed or is gone is an outcome, not an error. The Events go out only when nothing was
stopped (they say what the actions did); one that cannot be posted is only logged. A record's deletion (a gang with
no owner and no pod left) is done on its own, on the condition that the record is still the one read: a record
already gone, or changed since, is an outcome too.

Given the ``PriorityGate`` of the TrainingJobs' writes (``Writer.gate``), a gang's writes share its slots: a new
plan's, and those that steer pods into a plan held (members that came later), as placements; the rest as updates;
Events last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gputopo.control.gangactions import ClaimAllocation, GangActions, PodPatch
from gputopo.control.gangdra import claim_patches
from gputopo.controller.gate import PriorityGate
from gputopo.controller.writer import Priority
from gputopo.kube.client import DeletionOutcome, KubeClient
from gputopo.kube.errors import ApiError

__all__ = ["GangWritten", "write_gang"]

logger = logging.getLogger("gputopo.controller")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GangWritten:
    """What became of one gang's actions. ``evicted``: pods evicted, or gone already; ``eviction_blocked``: pods
    a PodDisruptionBudget kept; ``patch_failed``: pods whose patch was refused (one of its tests failed: the pod
    changed meanwhile) or that are gone. ``deleted``: what became of the record's deletion, when one was asked.
    ``error``: the API error that stopped the writes, if one did."""

    status_written: bool = False
    allocated: tuple[str, ...] = ()  # claims given their planned devices
    patched: tuple[str, ...] = ()
    patch_failed: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()
    eviction_blocked: tuple[str, ...] = ()
    deleted: DeletionOutcome | None = None
    error: str | None = None


def _guarded(patch: PodPatch) -> list[dict[str, Any]]:
    """The patch's ops after a test of the pod's uid: a pod deleted and created again under the same name
    meanwhile refuses it."""
    ops = list(patch.ops)
    return [{"op": "test", "path": "/metadata/uid", "value": patch.uid}, *ops] if patch.uid else ops


async def _all(calls: Sequence[Awaitable[T]]) -> tuple[list[T], ApiError | None]:
    """Every call's result, and the first API error among them (others than API errors raise)."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    results: list[T] = []
    error: ApiError | None = None
    for outcome in outcomes:
        if isinstance(outcome, ApiError):
            error = error or outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results.append(outcome)
    return results, error


async def write_gang(
    client: KubeClient,
    actions: GangActions,
    *,
    gate: PriorityGate | None = None,
    written_before_events: Callable[[GangWritten], None] | None = None,
) -> GangWritten:
    """Carry out ``actions`` in order (see the module); with ``gate``, within its slots. ``written_before_events``
    hears what became of the writes once they are through, before the Events go out (they wait for every other
    write in the gate)."""
    where = f"{actions.namespace}/{actions.record_name}"

    @contextlib.asynccontextmanager
    async def slot(priority: Priority) -> AsyncIterator[None]:
        if gate is None:
            yield
            return
        async with gate.slot(priority):
            yield

    async with slot(Priority.PLACEMENT if actions.placed or actions.patches else Priority.UPDATE):
        written = await _write(client, actions)
    if written.error is not None:
        logger.warning("gang %s: %s", where, written.error)
    if written_before_events is not None:
        written_before_events(written)
    if written.error is None and actions.events and not written.eviction_blocked:
        async with slot(Priority.EVENT):
            await _post_events(client, actions)
    return written


async def _write(client: KubeClient, actions: GangActions) -> GangWritten:
    namespace, name = actions.namespace, actions.record_name
    status_written = False
    if actions.deletion is not None:
        return await _delete(client, actions)
    try:
        if actions.record is not None:
            meta = {**(actions.record.get("metadata") or {}), "name": name, "namespace": namespace}
            await client.create_gang_placement({**actions.record, "metadata": meta})
        if actions.status is not None:
            await client.write_gang_placement_status(namespace, name, actions.status)
            status_written = True
    except ApiError as exc:
        return GangWritten(error=str(exc))

    evictions = [
        _named(e.name, client.evict_pod(namespace, e.name, e.grace_seconds, uid=e.uid or None))
        for e in actions.evictions
    ]
    outcomes, error = await _all(evictions)
    evicted = tuple(pod for pod, outcome in outcomes if outcome != "blocked")
    blocked = tuple(pod for pod, outcome in outcomes if outcome == "blocked")
    if error is not None or blocked:
        return GangWritten(status_written, evicted=evicted, eviction_blocked=blocked, error=_text(error))

    written, error = await _all([_allocate(client, namespace, c) for c in actions.claims])
    allocated = tuple(c.name for c, done in written if done)
    held = {c.pod for c in actions.claims if c.name not in allocated}  # a pod goes only with all its claims written
    patches = [
        _named(p.name, client.patch_pod_json(namespace, p.name, _guarded(p)))
        for p in actions.patches
        if p.name not in held
    ]
    applied, patch_error = await _all(patches)
    return GangWritten(
        status_written,
        allocated=allocated,
        patched=tuple(pod for pod, done in applied if done),
        patch_failed=(*(pod for pod, done in applied if not done), *sorted(held)),
        evicted=evicted,
        error=_text(error or patch_error),
    )


async def _delete(client: KubeClient, actions: GangActions) -> GangWritten:
    """The record deleted, if it is still the one read; nothing else of the actions is done."""
    deletion = actions.deletion
    assert deletion is not None
    namespace, name = actions.namespace, actions.record_name
    try:
        outcome = await client.delete_gang_placement(
            namespace, name, uid=deletion.uid, resource_version=deletion.resource_version or None
        )
    except ApiError as exc:
        return GangWritten(error=str(exc))
    if outcome == "deleted":
        logger.info("gang %s/%s: no pod of it left for the retention time; its record is deleted", namespace, name)
    return GangWritten(deleted=outcome)


async def _allocate(client: KubeClient, namespace: str, claim: ClaimAllocation) -> tuple[ClaimAllocation, bool]:
    """Write one claim's allocation (after kube-scheduler's finalizer, and clearing an earlier plan's); False when
    the claim changed or went meanwhile (the next pass reads it again)."""
    for status, ops in claim_patches(claim):
        if not await client.patch_claim_json(namespace, claim.name, ops, status=status):
            return claim, False
    return claim, True


async def _named(name: str, call: Awaitable[T]) -> tuple[str, T]:
    return name, await call


def _text(error: ApiError | None) -> str | None:
    return str(error) if error is not None else None


async def _post_events(client: KubeClient, actions: GangActions) -> None:
    """Post the gang's Events; one that fails is only logged (an Event says what happened; nothing waits)."""
    calls = [client.event_on(actions.namespace, about, n.type, n.reason, n.message) for about, n in actions.events]
    for outcome in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(outcome, BaseException):
            logger.debug("event on gang %s/%s not recorded: %s", actions.namespace, actions.record_name, outcome)
