"""`gputopo plan` for a gang gputopo does not own: a Job, JobSet, LeaderWorkerSet, PyTorchJob, PodGroup or Pod manifest.

The pods the owner's controller would create are built (``gputopo.gangs.manifests``), read as the operator reads
them (``read_gangs``) and planned on the cluster snapshot as the operator plans them (``plan_gang``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from gputopo.cli.errors import CliError
from gputopo.gangs.claims import Raw
from gputopo.gangs.manifests import ManifestError, pods_of
from gputopo.gangs.model import Gang
from gputopo.gangs.planning import GangPlan, plan_gang
from gputopo.gangs.read import read_gangs
from gputopo.placement import Snapshot, place
from gputopo.placement.network import tier_summary
from gputopo.placement.preemption import NoPreemption, PreemptionPlan
from gputopo.placement.types import GpuChoice, Unplaceable, plural

__all__ = ["Preempting", "gang_of", "show_gang_plan"]

# When the gang cannot be placed: its preemption's document and result, and how to print that result.
Preempting = tuple[
    Callable[[], tuple[dict[str, Any], PreemptionPlan | NoPreemption]],
    Callable[[PreemptionPlan | NoPreemption], None],
]


def gang_of(path: Path, documents: Sequence[Raw], snapshot: Snapshot) -> Gang:
    """The one gang the manifest declares, read as the operator reads it; any refusal is a ``CliError``."""
    try:
        built = pods_of(documents)
    except ManifestError as error:
        raise CliError(f"{path}: {error}") from None
    found = read_gangs(built.pods, built.owners)
    refused = (*found.refused, *found.unclaimed)
    if refused:
        raise CliError(f"{path}: pod {refused[0].pod}: {refused[0].reason}")
    if len(found.gangs) != 1:
        raise CliError(f"{path}: the manifest makes {plural(len(found.gangs), 'gang')}, not one")
    gang = found.gangs[0]
    if gang.problems:
        more = f" (and {len(gang.problems) - 1} more)" if len(gang.problems) > 1 else ""
        raise CliError(f"{path}: {gang.problems[0]}{more}")
    if gang.declared is None:
        raise CliError(f"{path}: the gang's size cannot be read from its {gang.id.source}")
    wanted = sum(gang.declared.shape)
    if not wanted:
        raise CliError(f"{path}: no rank asks for GPUs (resources.limits nvidia.com/gpu in its pod templates)")
    if wanted > snapshot.total_gpus:
        raise CliError(
            f"{path}: the gang asks for {plural(wanted, 'GPU')}, the cluster has {snapshot.total_gpus} in all"
        )
    return gang


def _document(gang: Gang, result: GangPlan | Unplaceable, snapshot: Snapshot) -> dict[str, Any]:
    declared = gang.declared
    assert declared is not None  # gang_of refuses a gang of unknown size
    doc: dict[str, Any] = {
        "source": gang.id.source,
        "namespace": gang.id.namespace,
        "gang": gang.id.name,
        "size": declared.size,
        "placed": isinstance(result, GangPlan),
    }
    if isinstance(result, GangPlan):
        ranks = []
        for rank in range(declared.size):
            worker = result.of_rank(rank)
            ranks.append(
                {
                    "rank": rank,
                    "role": declared.roles[rank] if rank < len(declared.roles) else "",
                    "gpuCount": declared.shape[rank],
                    "node": worker.node if worker else None,
                    "gpus": list(worker.gpus) if worker else [],
                    "nics": list(worker.nics) if worker else [],
                }
            )
        doc |= {
            "ranks": ranks,
            "estimatedBusBandwidthGBps": round(result.busbw_gbps, 3),
            "bottleneck": result.bottleneck,
            "tier": result.tier,
            "tierDomain": result.placement.tier_domain,
        }
    else:
        doc |= {"reason": result.reason, "details": list(result.details)}
    tiers = tier_summary(snapshot)
    doc["network"] = {"tiers": [t.to_data() for t in tiers], "beyondTopOversubscription": snapshot.tiers.beyond_top}
    return doc


def show_gang_plan(
    gang: Gang, snapshot: Snapshot, gpu_choice: GpuChoice, *, as_json: bool, preempting: Preempting | None = None
) -> None:
    """Plan the gang on the snapshot and print it as ``plan`` prints a TrainingJob's (exit 1 when unplaceable,
    unless ``preempting`` finds victims whose end lets it place)."""
    result = plan_gang(snapshot, gang, snapshot.tiers, place, gpu_choice)
    preemption: PreemptionPlan | NoPreemption | None = None
    doc = _document(gang, result, snapshot)
    if preempting is not None and isinstance(result, Unplaceable):
        doc["preemption"], preemption = preempting[0]()
    if as_json:
        typer.echo(json.dumps(doc))
        return
    for t in tier_summary(snapshot):
        if t.nodes_without_label:
            typer.echo(
                f"note: {len(t.nodes_without_label)} of {len(snapshot)} nodes lack the tier-{t.tier} label "
                f"{t.label}; each stands alone at that tier"
            )
    if isinstance(result, Unplaceable):
        typer.echo(f"Unplaceable: {result.reason}")
        for line in result.details:
            typer.echo(f"  - {line}")
        if preempting is not None and preemption is not None:
            preempting[1](preemption)
            if isinstance(preemption, PreemptionPlan):
                return
        raise typer.Exit(1)
    declared = gang.declared
    assert declared is not None  # gang_of refuses a gang of unknown size
    where = "across the top tier"
    if result.tier is not None:
        where = f"tier-{result.tier} switch {result.placement.tier_domain}"
    typer.echo(
        f"{gang.id.source} {gang.id.namespace}/{gang.id.name}: {plural(declared.size, 'rank')}, "
        f"{plural(sum(declared.shape), 'GPU')} under {where}"
    )
    typer.echo(f"estimated bus bandwidth {result.busbw_gbps:.1f} GB/s; limited by {result.bottleneck}")
    for rank in range(declared.size):
        role = declared.roles[rank] if rank < len(declared.roles) else ""
        worker = result.of_rank(rank)
        shown = f"({role})" if role else ""
        if worker is None:
            typer.echo(f"  rank {rank:>3} {shown:<10} no GPUs: not planned, its gate is just lifted")
            continue
        gpus = ",".join(map(str, worker.gpus))
        typer.echo(f"  rank {rank:>3} {shown:<10} {worker.node:<24} GPUs {gpus:<16} NICs {','.join(worker.nics)}")
