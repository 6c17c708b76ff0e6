"""The gang placement engine: ``place(snapshot, request) -> Placement | Unplaceable``."""

from __future__ import annotations

from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable, WorkerAssignment

__all__ = ["place"]


def place(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    """Place the whole gang or nothing (first version: first fit, lowest free GPU indices)."""
    workers: list[WorkerAssignment] = []
    for node in snapshot:
        if len(workers) == request.workers:
            break
        if not (node.ready and node.schedulable):
            continue
        free = sorted(node.free_gpus)
        if len(free) >= request.gpus_per_worker:
            workers.append(WorkerAssignment(len(workers), node.name, tuple(free[: request.gpus_per_worker])))
    if len(workers) < request.workers:
        return Unplaceable(f"needs {request.workers} nodes with {request.gpus_per_worker} free GPUs")
    return Placement(tuple(workers), 0.0, "unknown")
