"""`gputopo simulate --preemption P[,P..]`: replay a trace with priority classes under preemption policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from gputopo.cli.errors import CliError, fail, read_yaml
from gputopo.cli.summaries import show_summaries
from gputopo.placement.types import Snapshot
from gputopo.sim.cluster_file import ClusterFileError
from gputopo.sim.preemption.replay import PREEMPTION_POLICIES, replay
from gputopo.sim.preemption.trace import PriorityJob, priority_trace_from_data

__all__ = ["load_priority_trace", "plot_preemption", "run_preemption"]


def load_priority_trace(path: Path) -> tuple[list[PriorityJob], dict[str, int]]:
    """The jobs of a trace file with their priorities, and the classes' values by name."""
    data = read_yaml(path)
    try:
        jobs, classes = priority_trace_from_data(data)
    except ClusterFileError as error:
        raise CliError(f"{path}: {error}") from None
    return jobs, {name: c.value for name, c in classes.items()}


def plot_preemption(summaries: dict[str, dict[str, Any]], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summaries)
    panels = (
        ("high_wait_p99_s", "high-priority p99 wait (s)", "tab:red"),
        ("victim_gpu_hours_lost", "victim GPU-hours lost", "tab:orange"),
        ("high_mean_busbw_GBps", "high-priority mean bus bandwidth (GB/s)", "tab:blue"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.8))
    for ax, (key, label, color) in zip(axes, panels, strict=True):
        ax.bar(names, [summaries[n][key] or 0 for n in names], color=color)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=20)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_preemption(
    snapshot: Snapshot, trace: Path, names: list[str], high_class: str | None, as_json: bool, plot: Path | None
) -> None:
    unknown = [n for n in names if n not in PREEMPTION_POLICIES]
    if unknown or not names:
        fail(f"--preemption: unknown policies {unknown}; known: {', '.join(PREEMPTION_POLICIES)}")
    try:
        jobs, classes = load_priority_trace(trace)
    except CliError as error:
        fail(str(error))
    if not classes:
        fail(f"{trace}: priorityClasses: --preemption needs a trace with priority classes")
    high = high_class or max(classes, key=lambda name: classes[name])
    if high not in classes:
        fail(f"--high-class: {high!r} is not a priority class of {trace}; known: {', '.join(classes)}")
    summaries: dict[str, dict[str, Any]] = {}
    with Progress(transient=True, disable=as_json or len(jobs) < 50) as progress:
        for name in names:
            task = progress.add_task(name, total=len(jobs))

            def advance(done: int, _total: int, task: TaskID = task) -> None:
                progress.update(task, completed=min(done, len(jobs)))

            summaries[name] = replay(snapshot, jobs, PREEMPTION_POLICIES[name], on_event=advance).summary(high)
    document = {"preemption": {"highClass": high, "classes": classes, "policies": summaries}}

    def line(name: str, s: dict[str, Any]) -> str:
        busbw = s["high_mean_busbw_GBps"]
        return (
            f"{name:<14} {high} wait p50 {s['high_wait_p50_s'] or 0:.0f}s p99 {s['high_wait_p99_s'] or 0:.0f}s "
            f"(behind lower priority {s['high_wait_behind_lower_p99_s'] or 0:.0f}s)  "
            f"bus bandwidth {busbw or 0:.1f} GB/s  preemptions {s['preemptions']} (movable {s['victims_movable']})  "
            f"victim GPU-hours lost {s['victim_gpu_hours_lost']:.1f}  never placed {s['jobs_never_placed']}"
        )

    show_summaries(summaries, plot=(plot_preemption, plot), document=document if as_json else None, line=line)
