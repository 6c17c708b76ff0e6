"""What runs in a cluster file, for preemption: its running gangs, nominations and priority classes.

The schema is ``gputopo.api.clusterfile``; what it cannot say is checked here against the nodes: a node a
gang names is in the file, its GPUs exist and no two gangs hold the same GPU, a priority class is defined.
Every problem is a ``ClusterFileError`` naming the field (``gangs[2].workers[0].node: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gputopo.api.clusterfile import ClusterFile, ClusterGangWorker, PreemptionPolicy, PriorityClassEntry
from gputopo.api.problems import one_line
from gputopo.placement.preemption.gangs import Nomination, RunningGang
from gputopo.placement.preemption.running import held_placement
from gputopo.placement.types import NodeInfo, Snapshot
from gputopo.sim.cluster_file import ClusterFileError, snapshot_from_data

__all__ = ["ClusterState", "PriorityClass", "cluster_state_from_data", "priority_classes"]


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    checkpoint_wait_s: float = 0.0  # how long its gangs may wait for their victims' next checkpoint


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A cluster file's snapshot (running gangs' GPUs taken) and what runs on it."""

    snapshot: Snapshot
    running: tuple[RunningGang, ...]
    nominations: tuple[Nomination, ...]
    classes: Mapping[str, PriorityClass]
    now: float


def priority_classes(entries: list[PriorityClassEntry], where: str = "priorityClasses") -> dict[str, PriorityClass]:
    out: dict[str, PriorityClass] = {}
    for i, entry in enumerate(entries):
        if entry.name in out:
            raise ClusterFileError(f"{where}[{i}].name: {entry.name!r} is defined twice")
        out[entry.name] = PriorityClass(entry.name, entry.value, entry.preemption_policy, entry.checkpoint_wait_seconds)
    return out


def _gpus(
    snapshot: Snapshot, workers: list[ClusterGangWorker], where: str, owners: dict[tuple[str, int], str], owner: str
) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for j, worker in enumerate(workers):
        if worker.node not in snapshot:
            raise ClusterFileError(f"{where}[{j}].node: no node {worker.node!r} in nodes")
        count = snapshot.node(worker.node).topology.gpu_count
        for m, gpu in enumerate(worker.gpus):
            if gpu >= count:
                raise ClusterFileError(f"{where}[{j}].gpus[{m}]: no GPU{gpu}; the node has GPUs 0..{count - 1}")
            other = owners.get((worker.node, gpu))
            if other is not None:
                raise ClusterFileError(f"{where}[{j}].gpus[{m}]: GPU{gpu} of {worker.node} is also {other}'s")
            owners[(worker.node, gpu)] = owner
        out.append((worker.node, tuple(worker.gpus)))
    return out


def cluster_state_from_data(data: Any, *, base: Path | None = None) -> ClusterState:
    """The snapshot, running gangs and nominations of a cluster file; relative topology paths from ``base``."""
    snapshot = snapshot_from_data(data, base=base)
    try:
        parsed = ClusterFile.model_validate(data)
    except ValidationError as error:  # pragma: no cover - snapshot_from_data validated the same data
        raise ClusterFileError(one_line(error)) from None
    classes = priority_classes(parsed.priority_classes)
    owners: dict[tuple[str, int], str] = {}
    seen: dict[str, int] = {}
    gangs: list[tuple[int, Any, list[tuple[str, tuple[int, ...]]]]] = []
    for i, raw in enumerate(parsed.gangs):
        where = f"gangs[{i}]"
        if raw.name in seen:
            raise ClusterFileError(f"{where}.name: {raw.name!r} is already the name of gangs[{seen[raw.name]}]")
        seen[raw.name] = i
        priority = raw.priority or 0
        if raw.priority_class_name is not None:
            found = classes.get(raw.priority_class_name)
            if found is None:
                known = ", ".join(classes) or "none defined"
                raise ClusterFileError(
                    f"{where}.priorityClassName: unknown priority class {raw.priority_class_name!r}; known: {known}"
                )
            priority = found.value
        gangs.append((priority, raw, _gpus(snapshot, raw.workers, f"{where}.workers", owners, raw.name)))
    taken: dict[int, set[int]] = {}
    for (node, gpu), _ in owners.items():
        taken.setdefault(snapshot.index_of(node), set()).add(gpu)
    changed: dict[int, NodeInfo] = {
        i: replace(snapshot.nodes[i], used_gpus=snapshot.nodes[i].used_gpus | gpus) for i, gpus in taken.items()
    }
    snapshot = snapshot.part(range(len(snapshot)), changed)
    running = tuple(
        RunningGang(
            raw.name,
            priority,
            held_placement(snapshot, workers),
            start_time=raw.start_time,
            checkpoint_time=raw.checkpoint_time,
            checkpoint_interval_s=raw.checkpoint_interval_seconds,
            preemptible=raw.preemptible,
            min_runtime_s=raw.min_runtime_seconds,
            preempted_at=raw.preempted_at,
            preempted_by=frozenset(raw.preempted_by),
        )
        for priority, raw, workers in gangs
    )
    nominations = []
    nominated: dict[tuple[str, int], str] = {}
    for i, raw_nomination in enumerate(parsed.nominations):
        where = f"nominations[{i}].gpus"
        held = _gpus(snapshot, raw_nomination.gpus, where, nominated, f"nominations[{i}]")
        per: dict[str, frozenset[int]] = {}
        for node, gpus in held:
            per[node] = per.get(node, frozenset()) | frozenset(gpus)
        nominations.append(Nomination(raw_nomination.preemptor, per))
    return ClusterState(snapshot, running, tuple(nominations), classes, parsed.now)
