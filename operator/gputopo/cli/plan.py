"""`gputopo plan`: place one TrainingJob on a cluster snapshot file and explain the choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

from gputopo.api.trainingjob import TrainingJob, TrainingJobSpec
from gputopo.placement import Placement, Request, Snapshot, place
from gputopo.placement.cluster_file import snapshot_from_data
from gputopo.placement.exact import optimum
from gputopo.placement.network import tier_summary

__all__ = ["load_cluster", "register"]


def load_cluster(path: Path) -> Snapshot:
    data: Any = yaml.safe_load(path.read_text())
    return snapshot_from_data(data, base=path.parent)


def _request(path: Path) -> Request:
    data: Any = yaml.safe_load(path.read_text())
    if isinstance(data, dict) and "spec" in data:
        job = TrainingJob.model_validate(data)
        return Request.from_spec(job.spec, name=job.name)
    return Request.from_spec(TrainingJobSpec.model_validate(data))


def plan(
    job: Path = typer.Option(..., "--job", exists=True, help="TrainingJob manifest (YAML)."),
    cluster: Path = typer.Option(..., "--cluster", exists=True, help="Cluster snapshot file (YAML/JSON)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Place one job and explain it (or why it cannot be placed)."""
    snapshot = load_cluster(cluster)
    request = _request(job)
    result = place(snapshot, request)
    best = optimum(snapshot, request)
    if isinstance(result, Placement):
        doc: dict[str, Any] = {
            "placed": True,
            "placement": result.to_api().to_api(),
            "tier": result.tier,
            "tierDomain": result.tier_domain,
            "optimalBusBandwidthGBps": best,
        }
    else:
        doc = {"placed": False, "reason": result.reason, "details": list(result.details)}
    tiers = tier_summary(snapshot)
    doc["network"] = {"tiers": [t.to_data() for t in tiers], "beyondTopOversubscription": snapshot.tiers.beyond_top}
    if as_json:
        typer.echo(json.dumps(doc))
        return
    for t in tiers:
        if t.nodes_without_label:
            typer.echo(
                f"note: {len(t.nodes_without_label)} of {len(snapshot)} nodes lack the tier-{t.tier} label "
                f"{t.label}; each stands alone at that tier"
            )
    if not isinstance(result, Placement):
        typer.echo(f"Unplaceable: {result.reason}")
        for line in result.details:
            typer.echo(f"  - {line}")
        raise typer.Exit(1)
    where = f"tier-{result.tier} switch {result.tier_domain}" if result.tier is not None else "across the top tier"
    typer.echo(f"{request.workers} x {request.gpus_per_worker} GPUs under {where}")
    typer.echo(
        f"estimated bus bandwidth {result.busbw_gbps:.1f} GB/s (optimum {best or 0:.1f}); "
        f"limited by {result.bottleneck}"
    )
    for w in result.workers:
        typer.echo(f"  rank {w.rank:>3}  {w.node:<24} GPUs {','.join(map(str, w.gpus)):<16} NICs {','.join(w.nics)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gputopo` app."""
    app.command("plan")(plan)
