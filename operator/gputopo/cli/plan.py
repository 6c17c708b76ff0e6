"""`gputopo plan`: place one TrainingJob (or a gang of another owner) on a cluster snapshot file and explain the
choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from gputopo.api.problems import one_line
from gputopo.api.trainingjob import TrainingJob
from gputopo.cli.errors import CliError, fail, read_yaml, read_yaml_documents
from gputopo.cli.plan_gang import Preempting, gang_of, show_gang_plan
from gputopo.cli.preempt import gang_preemptor, preemption_doc, preemptor, print_preemption
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import job_facts
from gputopo.control.validation import problems
from gputopo.gangs.manifests import KINDS, kind_of
from gputopo.placement import Placement, Request, Snapshot, place
from gputopo.placement.network import tier_summary
from gputopo.placement.preemption import PreemptionPlan, hold_nominations
from gputopo.placement.template import TemplateError
from gputopo.sim.cluster_file import ClusterFileError
from gputopo.sim.exact import optimum
from gputopo.sim.preemption.cluster_file import ClusterState, cluster_state_from_data

__all__ = ["load_cluster", "load_cluster_state", "register"]


def load_cluster_state(path: Path) -> ClusterState:
    """The snapshot in a cluster file (its running gangs' GPUs taken) and what runs there; any problem is a
    ``CliError`` naming the file and the field."""
    data = read_yaml(path)
    try:
        return cluster_state_from_data(data, base=path.parent)
    except ClusterFileError as error:
        raise CliError(f"{path}: {error}") from None


def load_cluster(path: Path) -> Snapshot:
    """The snapshot in a cluster file; any problem is a ``CliError`` naming the file and the field."""
    return load_cluster_state(path).snapshot


def _documents(path: Path) -> list[Any]:
    """The manifest's documents: one TrainingJob (or its bare spec), or a gang's owner (with the PodGroup its pods
    name, or a PodGroup with a Pod)."""
    documents = read_yaml_documents(path)
    kinds = [kind_of(d) for d in documents]
    if any(k in KINDS for k in kinds):
        return documents
    if len(documents) > 1:
        raise CliError(f"{path}: holds {len(documents)} documents; only a PodGroup comes with a second one (its Pod)")
    if kinds and kinds[0] not in ("", "TrainingJob"):
        raise CliError(f"{path}: kind: {kinds[0]} is none of TrainingJob, {', '.join(KINDS)}")
    return documents


def _job_body(path: Path, documents: list[Any]) -> dict[str, Any]:
    """A whole TrainingJob object, from a manifest or from its bare spec."""
    data = documents[0] if documents else None
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a TrainingJob manifest (or its spec), not {type(data).__name__}")
    if "spec" in data or "kind" in data or "apiVersion" in data:
        return data
    return {"metadata": {"name": path.stem}, "spec": data}


def _request(
    path: Path, documents: list[Any], snapshot: Snapshot, allocation: GpuAllocation = GpuAllocation.DRA
) -> tuple[Request, TrainingJob]:
    """The job's request, checked as the operator checks it: the CRD's schema, then its own rules."""
    body = _job_body(path, documents)
    try:
        job = TrainingJob.model_validate(body)
    except ValidationError as error:
        raise CliError(f"{path}: {one_line(error)}") from None
    metadata = dict(job.metadata) if isinstance(job.metadata, dict) else {}
    metadata.setdefault("name", path.stem)
    facts = job_facts({**body, "metadata": metadata})
    found = problems(facts, snapshot.tiers)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CliError(f"{path}: {found[0]}{more}")
    try:
        return Request.from_spec(job.spec, name=job.name, gpu_choice=allocation.gpu_choice), job
    except TemplateError as error:
        raise CliError(f"{path}: spec.{error}") from None


def plan(
    job: Path = typer.Option(
        ...,
        "--job",
        help="TrainingJob manifest (YAML), or a gang's: a Job (Indexed, or with spec.scheduling), JobSet, "
        "LeaderWorkerSet (one group is planned), PyTorchJob, PodGroup with a Pod as a second document, or Pods "
        "that name their gang (gputopo.io/gang, a Kueue pod group); a PodGroup the pods name may come beside them.",
    ),
    cluster: Path = typer.Option(..., "--cluster", help="Cluster snapshot file (YAML/JSON)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    gpu_allocation: GpuAllocation = typer.Option(
        GpuAllocation.DRA,
        "--gpu-allocation",
        help="Who picks each rank's GPUs within its node, as the operator's setting of that name: dra (the GPUs "
        "gputopo plans) or devicePlugin (the GPUs NVIDIA's device plugin will pick on the node's free GPUs).",
    ),
    preempt: bool = typer.Option(
        False,
        "--preempt",
        help="When the job cannot be placed, name the lower-priority running gangs (the cluster file's gangs) to "
        "preempt for it (a gang: for every GPU shape, each exclusive part in a domain of its own), the domain they "
        "clear and where it then goes, or why no preemption helps.",
    ),
    priority_class: str | None = typer.Option(
        None,
        "--priority-class",
        help=(
            "The job's priority class, by a name of the cluster file's priorityClasses "
            "(default: its spec.priorityClassName, else spec.priority)."
        ),
    ),
) -> None:
    """Place one job and explain it (or why it cannot be placed)."""
    try:
        state = load_cluster_state(cluster)
        documents = _documents(job)
        if any(kind_of(d) in KINDS for d in documents):
            gang = gang_of(job, documents, state.snapshot)
            held = hold_nominations(state.snapshot, state.nominations, for_gang=gang.id.key[1])
            preempting: Preempting | None = None
            if preempt:
                as_preemptor = gang_preemptor(state, gang, priority_class)
                preempting = (
                    lambda: preemption_doc(state, as_preemptor),
                    lambda found: print_preemption(found, as_preemptor, state.now),
                )
            show_gang_plan(gang, held, gpu_allocation.gpu_choice, as_json=as_json, preempting=preempting)
            return
        request, body = _request(job, documents, state.snapshot, gpu_allocation)
        named = priority_class or body.spec.priority_class_name
        wanted = preemptor(state, request, body.spec.priority or 0, named) if preempt else None
    except CliError as error:
        fail(str(error))
    # GPUs nominated to other gangs are not this job's to take.
    snapshot = hold_nominations(state.snapshot, state.nominations, for_gang=request.name)
    result = place(snapshot, request)
    try:
        best = optimum(snapshot, request)
    except (RuntimeError, ValueError):
        best = None  # no reference for this instance (too large without highspy, or NVLink domains on the ILP)
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
    preemption = None
    if wanted is not None and not isinstance(result, Placement):
        doc["preemption"], preemption = preemption_doc(state, wanted)
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
        if preemption is not None and wanted is not None:
            print_preemption(preemption, wanted, state.now)
            if isinstance(preemption, PreemptionPlan):
                return
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
