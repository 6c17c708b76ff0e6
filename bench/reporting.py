"""What every benchmark report shares: where reports go, the head each opens with, summary statistics, the
number format of the Markdown tables, and the plot of jobs Running over time.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "REPORTS",
    "fmt",
    "mean",
    "median",
    "percentile",
    "plot_running",
    "pyplot",
    "report_head",
    "stats",
    "step_running",
    "write_plotted_report",
    "write_report",
]

REPORTS = Path(__file__).parent / "reports"


def report_head(argv: Sequence[str]) -> dict[str, str]:
    """The command that made a report and the machine it ran on, as every report opens."""
    return {
        "command": "python " + " ".join(argv),
        "machine": f"{os.cpu_count()} CPUs (shared), Python {sys.version.split()[0]}",
    }


def write_report(name: str, report: Mapping[str, Any], text: str) -> None:
    """``bench/reports/<name>.json`` and ``.md``, and the Markdown on stdout."""
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (REPORTS / f"{name}.md").write_text(text)
    print(text)


def write_plotted_report(
    name: str,
    report: dict[str, Any],
    plot: Callable[[dict[str, Any], Path], bool],
    markdown: Callable[[dict[str, Any]], str],
) -> None:
    """The report's plot ``<name>.png`` where one can be drawn (then named in ``report["plot"]``), and its JSON
    and Markdown (``write_report``)."""
    REPORTS.mkdir(exist_ok=True)
    if plot(report, REPORTS / f"{name}.png"):
        report["plot"] = f"{name}.png"
    write_report(name, report, markdown(report))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, max and mean (all ``None`` for no values)."""
    if not values:
        return {"p50": None, "p90": None, "max": None, "mean": None}
    return {"p50": statistics.median(values), "p90": percentile(values, 0.9), "max": max(values), "mean": mean(values)}


def fmt(value: float | None, spec: str = ".1f") -> str:
    """A table cell: ``-`` where there is no figure."""
    return "-" if value is None else format(value, spec)


def cpu_table(cpu: Mapping[str, Mapping[str, float]]) -> list[str]:
    """A Markdown table of CPU seconds per component (rows, most used by the first side first) and side
    (columns, in ``cpu``'s order): ``cpu`` is side -> component -> seconds."""
    run = list(cpu)
    components = sorted({c for s in run for c in cpu[s]}, key=lambda c: -cpu[run[0]].get(c, 0.0))
    lines = ["| component | " + " | ".join(run) + " |", "|---|" + "---:|" * len(run)]
    for component in components:
        lines.append(f"| {component} | " + " | ".join(fmt(cpu[s].get(component)) for s in run) + " |")
    totals = " | ".join(fmt(sum(cpu[s].values())) for s in run)
    return [*lines, f"| all | {totals} |"]


def pyplot() -> Any | None:
    """matplotlib's pyplot on the Agg backend, or ``None`` where matplotlib is not installed (no plot then)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def step_running(ax: Any, jobs: Mapping[str, Mapping[str, Any]], label: str, color: str | None = None) -> None:
    """Jobs with every pod Running against seconds since submission, one step per job (a side's ``jobs`` rows)."""
    times = sorted(r["seconds"] for r in jobs.values() if r["running"])
    ax.step([0.0, *times], list(range(len(times) + 1)), where="post", label=label, color=color)
    ax.set_xlabel("seconds since submission")
    ax.set_ylabel("jobs with every pod Running")


def plot_running(sides: Mapping[str, Mapping[str, Any]], colours: Mapping[str, str], title: str, path: Path) -> bool:
    """Jobs Running over time, one step line per side (``sides``: side -> its result with ``jobs`` rows), in the
    order and colours of ``colours``; False where matplotlib is not installed."""
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for side, colour in colours.items():
        if side in sides:
            step_running(ax, sides[side]["jobs"], side, colour)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
