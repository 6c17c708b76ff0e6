"""Nominations: GPUs freed (or being freed) for a preemptor are held for it until its pods bind.

A nomination is an input of the snapshot: ``hold_nominations`` takes every nominated GPU out of the free
pool except those nominated to the gang being placed, so neither a later arrival nor backfill gets them.
A nomination lapses when its preemptor is gone or can no longer use the GPUs (``lapsed_nominations``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gputopo.placement.engine import place
from gputopo.placement.preemption.gangs import Nomination
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable, WorkerAssignment

__all__ = ["Pending", "free_nominated", "hold_nominations", "lapsed_nominations", "nominated_only"]


def free_nominated(snapshot: Snapshot, gpus: Mapping[str, Iterable[int]]) -> Placement | None:
    """The GPUs of ``gpus`` (by node) that the snapshot has free, as a placement to reserve; None when none is.
    Nodes the snapshot lacks and GPUs already in use are left out."""
    workers: list[WorkerAssignment] = []
    for name, nominated in sorted(gpus.items()):
        if name not in snapshot:
            continue
        info = snapshot.node(name)
        free = sorted(g for g in set(nominated) if g not in info.used_gpus and g < info.topology.gpu_count)
        if free:
            workers.append(WorkerAssignment(len(workers), name, tuple(free)))
    return Placement(tuple(workers), 0.0, "nominated") if workers else None


def hold_nominations(snapshot: Snapshot, nominations: Iterable[Nomination], *, for_gang: str = "") -> Snapshot:
    """The snapshot with the GPUs nominated to any gang but ``for_gang`` taken (as if already in use)."""
    held: dict[str, set[int]] = {}
    for nomination in nominations:
        if nomination.preemptor == for_gang:
            continue
        for node, gpus in nomination.gpus.items():
            held.setdefault(node, set()).update(gpus)
    placement = free_nominated(snapshot, held)
    return snapshot.reserve(placement) if placement is not None else snapshot


def nominated_only(snapshot: Snapshot, nomination: Nomination) -> Snapshot:
    """The nomination's nodes with only its GPUs free (its victims taken as gone)."""
    nodes = []
    for name, gpus in sorted(nomination.gpus.items()):
        if name not in snapshot:
            continue
        node = snapshot.node(name)
        nodes.append(replace(node, used_gpus=frozenset(range(node.topology.gpu_count)) - gpus))
    return Snapshot(nodes, snapshot.tiers, cache=snapshot.cache)


# How a pending preemptor is placed: its request, or a planner (a gang of several shapes is more than one request).
Pending = Request | Callable[[Snapshot], Placement | Unplaceable]


def lapsed_nominations(
    snapshot: Snapshot, nominations: Iterable[Nomination], pending: Mapping[str, Pending]
) -> dict[str, str]:
    """Per preemptor whose nomination lapses, why: it is no longer pending, or its GPUs no longer hold it
    (a node gone, cordoned or failed under them)."""
    out: dict[str, str] = {}
    for nomination in nominations:
        request = pending.get(nomination.preemptor)
        if request is None:
            out[nomination.preemptor] = "the preemptor is no longer pending"
            continue
        missing = sorted(n for n in nomination.gpus if n not in snapshot)
        if missing:
            out[nomination.preemptor] = f"node {missing[0]} of the nomination is gone"
            continue
        mine = nominated_only(snapshot, nomination)
        found = place(mine, request) if isinstance(request, Request) else request(mine)
        if not isinstance(found, Placement):
            out[nomination.preemptor] = "the nominated GPUs no longer hold the preemptor"
    return out
