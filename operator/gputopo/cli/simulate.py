"""`gputopo simulate`: replay a trace against a cluster under several policies and compare them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.progress import Progress, TaskID

from gputopo.cli.errors import CliError, fail, read_yaml
from gputopo.cli.plan import load_cluster
from gputopo.cli.simulate_preemption import run_preemption
from gputopo.cli.summaries import show_summaries
from gputopo.control.dra import GpuAllocation
from gputopo.sim.cluster_file import ClusterFileError, snapshot_to_data, trace_from_data, trace_to_data
from gputopo.sim.generate import TraceJob, generate_cluster, generate_nvl72_cluster, generate_trace
from gputopo.sim.policies import POLICIES
from gputopo.sim.preemption.replay import PREEMPTION_POLICIES
from gputopo.sim.preemption.trace import DEFAULT_CLASSES, generate_priority_trace, priority_trace_to_data
from gputopo.sim.simulation import simulate

__all__ = ["load_trace", "plot_quality", "register"]


def plot_quality(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summaries)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(names, [summaries[n]["mean_busbw_GBps"] or 0 for n in names], color="tab:blue")
    left.set_ylabel("mean estimated bus bandwidth (GB/s)")
    right.bar(names, [summaries[n]["ratio_to_optimal"] or 0 for n in names], color="tab:green")
    right.set_ylabel("ratio to exact optimum")
    right.set_ylim(0, 1.05)
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_trace(path: Path) -> list[TraceJob]:
    """The jobs in a trace file; any problem is a ``CliError`` naming the file and the field."""
    data = read_yaml(path)
    try:
        return trace_from_data(data)
    except ClusterFileError as error:
        raise CliError(f"{path}: {error}") from None


def run(
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster snapshot file."),
    trace: Path | None = typer.Option(None, "--trace", help="Trace file (jobs with arrival and duration)."),
    policy: str = typer.Option(",".join(POLICIES), "--policy", help="Comma-separated policies."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of quality per policy."),
    exact: bool = typer.Option(True, "--exact/--no-exact", help="Compute the exact optimum per job."),
    generate_cluster_nodes: int = typer.Option(
        0, "--generate-cluster", help="Write a generated cluster of N nodes to --cluster and exit."
    ),
    generate_trace_jobs: int = typer.Option(
        0, "--generate-trace", help="Write a generated trace of N jobs to --trace and exit."
    ),
    used_share: float = typer.Option(0.3, "--used-share", help="Share of GPUs already used in a generated cluster."),
    cluster_profile: str = typer.Option(
        "mixed",
        "--cluster-profile",
        help="Generated cluster: mixed (8-GPU node types) or nvl72 (GB200 NVL72 racks of 18 trays; N rounded up "
        "to whole racks; the trace then has 4-GPU workers and some jobs with NVLink slices).",
    ),
    seed: int = typer.Option(0, "--seed"),
    gpu_allocation: GpuAllocation = typer.Option(
        GpuAllocation.DRA,
        "--gpu-allocation",
        help="Who picks each worker's GPUs within its node, as the operator's setting: dra (gputopo's plan) or "
        "devicePlugin (the pick of NVIDIA's device plugin, which gputopo then plans with).",
    ),
    preemption: str = typer.Option(
        "",
        "--preemption",
        help="Replay the trace's priority classes under these preemption policies instead (comma-separated: "
        f"{', '.join(PREEMPTION_POLICIES)}); reports the high class's wait and bus bandwidth, preemptions and "
        "victim GPU-hours lost. A generated trace gets priority classes with this option.",
    ),
    high_class: str | None = typer.Option(
        None, "--high-class", help="The priority class reported as high (default: the trace's highest)."
    ),
) -> None:
    """Replay job arrivals and departures against a cluster per policy."""
    if cluster_profile not in ("mixed", "nvl72"):
        raise typer.BadParameter(f"--cluster-profile must be mixed or nvl72, not {cluster_profile!r}")
    nvl72 = cluster_profile == "nvl72"
    if generate_cluster_nodes or generate_trace_jobs:
        if generate_cluster_nodes and cluster:
            if nvl72:
                snap = generate_nvl72_cluster(-(-generate_cluster_nodes // 18))
            else:
                snap = generate_cluster(random.Random(seed), generate_cluster_nodes, used_share=used_share)
            cluster.write_text(yaml.safe_dump(snapshot_to_data(snap), sort_keys=False))
        if generate_trace_jobs and trace:
            shape = {"gpus_per_node": 4, "slice_share": 0.3} if nvl72 else {}
            if preemption:
                rng = random.Random(seed + 1)
                ranked, classes = generate_priority_trace(rng, generate_trace_jobs, classes=DEFAULT_CLASSES, **shape)
                trace.write_text(yaml.safe_dump(priority_trace_to_data(ranked, classes), sort_keys=False))
                return
            jobs = generate_trace(random.Random(seed + 1), generate_trace_jobs, **shape)  # type: ignore[arg-type]
            trace.write_text(yaml.safe_dump(trace_to_data(jobs), sort_keys=False))
        return
    if cluster is None or trace is None:
        fail("--cluster and --trace are required")
    if preemption:
        try:
            base = load_cluster(cluster)
        except CliError as error:
            fail(str(error))
        names = [p.strip() for p in preemption.split(",") if p.strip()]
        run_preemption(base, trace, names, high_class, as_json, plot)
        return
    names = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        fail(f"--policy: unknown policies {unknown}; known: {', '.join(POLICIES)}")
    try:
        snapshot = load_cluster(cluster)
        jobs = load_trace(trace)
    except CliError as error:
        fail(str(error))
    summaries: dict[str, dict[str, Any]] = {}
    with Progress(transient=True, disable=as_json or len(jobs) < 50) as progress:
        for name in names:
            task = progress.add_task(name, total=2 * len(jobs))

            def advance(done: int, _total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done)

            report = simulate(
                snapshot,
                jobs,
                name,
                POLICIES[name],
                exact=exact,
                on_event=advance,
                gpu_choice=gpu_allocation.gpu_choice,
            )
            summaries[name] = report.summary()
    show_summaries(
        summaries, plot=(plot_quality, plot), document={"policies": summaries} if as_json else None, line=_line
    )


def _line(name: str, s: dict[str, Any]) -> str:
    ratio = s["ratio_to_optimal"]
    return (
        f"{name:<16} mean {s['mean_busbw_GBps'] or 0:7.1f} GB/s  median {s['median_busbw_GBps'] or 0:7.1f}  "
        f"ratio {ratio if ratio is None else round(ratio, 3)}  one-tier {s['share_multi_node_in_one_tier']}  "
        f"util {s['gpu_utilisation']:.2f}  wait {s['mean_wait_s']:.0f}s  frag {s['mean_fragmentation']:.2f}"
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gputopo` app."""
    app.command("simulate")(run)
