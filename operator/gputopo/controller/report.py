"""Where each TrainingJob landed, as a table for people (``gputopo demo`` prints it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.table import Table

from gputopo.control.facts import job_facts

__all__ = ["placement_rows", "placement_table"]

COLUMNS = ("Job", "Phase", "Workers x GPUs", "Placement", "Bus BW (GB/s)", "Bottleneck", "Restarts")


def placement_rows(jobs: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """One row per TrainingJob body (as ``kubectl get -o json`` gives them), in name order."""
    rows = []
    for body in jobs:
        job = job_facts(body)
        status, spec = job.status, job.spec
        shape = f"{spec.workers}x{spec.gpus_per_worker}" if spec else "?"
        placement = status.placement
        if placement is not None and placement.workers:
            where = "; ".join(f"{w.node}[{','.join(map(str, w.gpus))}]" for w in placement.workers)
            busbw = f"{placement.estimated_bus_bandwidth_g_bps:.1f}"
            bottleneck = placement.bottleneck
        else:
            waiting = next((c for c in status.conditions if c.type in ("Invalid", "Placed") and c.message), None)
            where, busbw, bottleneck = "—", "—", waiting.message if waiting else ""
        rows.append(
            (f"{job.namespace}/{job.name}", str(status.phase), shape, where, busbw, bottleneck, str(status.restarts))
        )
    return sorted(rows)


def placement_table(jobs: Iterable[Mapping[str, Any]], title: str = "TrainingJob placements") -> Table:
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in placement_rows(jobs):
        table.add_row(*row)
    return table
