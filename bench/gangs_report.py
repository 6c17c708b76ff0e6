"""The report of ``bench_gangs.py``: each way summed up, gputopo's two ways against kube-scheduler's gang
scheduling, the goal, and the plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gang_trace import SIZES, Job
from reporting import cpu_table, fmt, mean, median, plot_running, stats

__all__ = [
    "FLOORS",
    "GOAL_BUSBW",
    "GOAL_TIME",
    "KUBE",
    "MINIMAL",
    "PINNED",
    "PODGROUP",
    "TRAININGJOB",
    "WAYS",
    "markdown",
    "plot",
    "summarise",
]

KUBE = "kube-scheduler gang"
PODGROUP = "gputopo PodGroup"
MINIMAL = "floor: minimal"
PINNED = "floor: pinned"
TRAININGJOB = "gputopo TrainingJob"
FLOORS = {MINIMAL: "minimal", PINNED: "pinned"}  # way -> podgroup_floor's name for it
WAYS = (KUBE, PODGROUP, MINIMAL, PINNED, TRAININGJOB)
COLOURS = {KUBE: "tab:orange", PODGROUP: "tab:blue", MINIMAL: "tab:gray", PINNED: "tab:olive", TRAININGJOB: "tab:green"}
GOAL_TIME = 1.3  # gputopo's PodGroup way at most this many times kube-scheduler's time ...
GOAL_BUSBW = 1.4  # ... and at least this many times its mean bus bandwidth on multi-GPU jobs


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def summarise(ways: Mapping[str, dict[str, Any]], trace: Sequence[Job]) -> dict[str, Any]:
    run = [w for w in WAYS if w in ways]
    # One GPU does no all-reduce: its "bus bandwidth" says nothing, so 1-GPU jobs stay out of the averages.
    everywhere = [j for j in trace if all(ways[w]["jobs"][j.name]["running"] for w in run)]
    multi = [j for j in everywhere if j.gpus > 1]

    def way(result: dict[str, Any]) -> dict[str, Any]:
        rows = result["jobs"]
        up = [j for j in trace if rows[j.name]["running"]]
        times = stats([rows[j.name]["seconds"] for j in up])
        return {
            "from_creation_s": stats(
                [rows[j.name]["from_creation_s"] for j in up if "from_creation_s" in rows[j.name]]
            ),
            "jobs_running": len(up),
            "gpus_in_running_jobs": sum(j.gpus for j in up),
            "time_to_running_s": times,
            "makespan_s": times["max"],
            "busbw_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in up if j.gpus > 1]),
            "common_busbw_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in multi]),
            "common_time_to_running_s": stats([rows[j.name]["seconds"] for j in everywhere]),
            "idle_in_partial_gangs": result["idle_in_partial_gangs"],
        }

    summary: dict[str, Any] = {w: way(ways[w]) for w in run}
    summary["jobs_running_every_way"] = len(everywhere)
    summary["multi_gpu_jobs_running_every_way"] = len(multi)
    by_size: dict[str, dict[str, Any]] = {}
    for shape in SIZES:
        jobs = [j for j in everywhere if (j.workers, j.gpus_per_worker) == shape]
        entry: dict[str, Any] = {"jobs_running_every_way": len(jobs)}
        for w in run:
            entry[w] = {
                "s_p50": median([ways[w]["jobs"][j.name]["seconds"] for j in jobs]),
                "busbw_mean_gbps": mean([ways[w]["jobs"][j.name]["busbw_gbps"] for j in jobs]),
            }
        by_size[f"{shape[0]}x{shape[1]}"] = entry
    summary["by_size"] = by_size
    for ours in (PODGROUP, MINIMAL, PINNED, TRAININGJOB):
        if ours not in summary or KUBE not in summary:
            continue
        a, k = summary[ours], summary[KUBE]
        summary[f"{ours} / {KUBE}"] = {
            "from_creation_p50": _ratio(a["from_creation_s"]["p50"], k["from_creation_s"]["p50"]),
            "from_creation_p90": _ratio(a["from_creation_s"]["p90"], k["from_creation_s"]["p90"]),
            "time_p50": _ratio(a["time_to_running_s"]["p50"], k["time_to_running_s"]["p50"]),
            "time_p90": _ratio(a["time_to_running_s"]["p90"], k["time_to_running_s"]["p90"]),
            "makespan": _ratio(a["makespan_s"], k["makespan_s"]),
            "common_busbw_mean": _ratio(a["common_busbw_mean_gbps"], k["common_busbw_mean_gbps"]),
        }
    ratios = summary.get(f"{PODGROUP} / {KUBE}")
    if ratios is not None:
        times = [ratios["time_p50"], ratios["time_p90"], ratios["makespan"]]
        summary["goal"] = {
            "time": f"PodGroup way's time to Running from submission (p50, p90) and makespan ≤ {GOAL_TIME}x "
            "kube-scheduler's",
            "busbw": f"its mean bus bandwidth on multi-GPU jobs ≥ {GOAL_BUSBW}x kube-scheduler's",
            "time_met": all(t is not None and t <= GOAL_TIME for t in times),
            "busbw_met": ratios["common_busbw_mean"] is not None and ratios["common_busbw_mean"] >= GOAL_BUSBW,
        }
    for floor in FLOORS:
        r = summary.get(f"{floor} / {KUBE}")
        if r is not None:
            # no placer that steers through the API can be faster than a client that only makes its writes
            within = all(t is not None and t <= GOAL_TIME for t in (r["time_p50"], r["time_p90"], r["makespan"]))
            summary.setdefault("floor_within_time_goal", {})[floor] = within
        if PODGROUP in summary and floor in summary:
            a, f = summary[PODGROUP], summary[floor]
            summary[f"{PODGROUP} / {floor}"] = {
                "time_p50": _ratio(a["time_to_running_s"]["p50"], f["time_to_running_s"]["p50"]),
                "time_p90": _ratio(a["time_to_running_s"]["p90"], f["time_to_running_s"]["p90"]),
                "makespan": _ratio(a["makespan_s"], f["makespan_s"]),
            }
    return summary


def _table(report: dict[str, Any]) -> list[str]:
    summary, ways = report["summary"], report["ways"]
    run = [w for w in WAYS if w in summary]
    lines = [
        "| | " + " | ".join(run) + " |",
        "|---|" + "---:|" * len(run),
    ]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(w) for w in run) + " |")

    row("jobs Running (of the trace)", lambda w: f"{summary[w]['jobs_running']}/{report['config']['jobs']}")
    row("GPUs in Running jobs", lambda w: str(summary[w]["gpus_in_running_jobs"]))
    row("time to Running from creation p50 (s)", lambda w: fmt(summary[w]["from_creation_s"]["p50"]))
    row("time to Running from creation p90 (s)", lambda w: fmt(summary[w]["from_creation_s"]["p90"]))
    row("time to Running from submission p50 (s)", lambda w: fmt(summary[w]["time_to_running_s"]["p50"]))
    row("time to Running from submission p90 (s)", lambda w: fmt(summary[w]["time_to_running_s"]["p90"]))
    row("makespan: last job Running (s)", lambda w: fmt(summary[w]["makespan_s"]))
    row("bus bandwidth, mean of multi-GPU jobs Running (GB/s)", lambda w: fmt(summary[w]["busbw_mean_gbps"]))
    row(
        f"the same, jobs Running every way ({summary['multi_gpu_jobs_running_every_way']})",
        lambda w: fmt(summary[w]["common_busbw_mean_gbps"]),
    )
    row("idle in partial gangs (GPU·s)", lambda w: fmt(summary[w]["idle_in_partial_gangs"]["gpu_seconds"]))
    row("idle in partial gangs, peak (GPUs)", lambda w: fmt(summary[w]["idle_in_partial_gangs"]["peak_gpus"], ".0f"))
    row("partial gangs when settled", lambda w: str(ways[w]["partial_gangs_at_end"]))
    row("settled after (s)", lambda w: f"{fmt(ways[w]['settled_after_s'])} ({ways[w]['settled_because']})")
    row("`kubectl create` of the trace (s)", lambda w: fmt(ways[w]["submit_seconds"]))
    row("API server writes until settled", lambda w: str(ways[w].get("api_writes_total", "-")))
    return lines


def markdown(report: dict[str, Any]) -> str:
    summary, config = report["summary"], report["config"]
    run = [w for w in WAYS if w in summary]
    out = [
        "# Gangs: gputopo against kube-scheduler's own gang scheduling",
        "",
        f"`{report['command']}` — {report['machine']}; {report['nodes']} nodes ({report['gpus']} GPUs, "
        f"profile `mixed`), {config['jobs']} jobs (seed {config['seed']}, {config['demand_gpus']} GPUs asked), "
        f"settled after {config['quiet_s']:.0f} s without a new pod Running (at most {config['deadline_s']:.0f} s); "
        f"the operator's API requests in flight: {config.get('api_concurrency', '-')}. "
        f"Whole run {report['bench_wall_s']:.0f} s.",
        "",
        *_table(report),
        "",
    ]
    for ours in (PODGROUP, MINIMAL, PINNED, TRAININGJOB):
        ratios = summary.get(f"{ours} / {KUBE}")
        if ratios:
            out.append(
                f"- {ours} / {KUBE}: time to Running from creation "
                f"p50 {fmt(ratios['from_creation_p50'], '.2f')}x, p90 {fmt(ratios['from_creation_p90'], '.2f')}x; "
                f"from submission p50 {fmt(ratios['time_p50'], '.2f')}x, "
                f"p90 {fmt(ratios['time_p90'], '.2f')}x, "
                f"makespan {fmt(ratios['makespan'], '.2f')}x; bus bandwidth (multi-GPU jobs Running every way) "
                f"{fmt(ratios['common_busbw_mean'], '.2f')}x."
            )
    goal = summary.get("goal")
    if goal:
        out += [
            "",
            f"**Goal.** {goal['time']}: {'met' if goal['time_met'] else 'missed'}. "
            f"{goal['busbw'][0].upper() + goal['busbw'][1:]}: {'met' if goal['busbw_met'] else 'missed'}.",
        ]
    floors = summary.get("floor_within_time_goal") or {}
    if floors:
        said = [
            f"`{floor}` {'within' if within else 'beyond'} {GOAL_TIME}x kube-scheduler's time"
            + (
                f" (the PodGroup way takes p50 {fmt(r['time_p50'], '.2f')}x, p90 {fmt(r['time_p90'], '.2f')}x, "
                f"makespan {fmt(r['makespan'], '.2f')}x of it)"
                if (r := summary.get(f"{PODGROUP} / {floor}"))
                else ""
            )
            for floor, within in floors.items()
        ]
        out += [
            "",
            "**The floor.** A client that decides nothing and only steers each gang to the PodGroup way's plans, with "
            "the operator's own patches (no operator running): " + "; ".join(said) + ". No placer that steers "
            "kube-scheduler through the API can be faster than a client that only makes its writes.",
        ]
    out += ["", "By job size (jobs Running every way): p50 time to Running (s) / mean bus bandwidth (GB/s)", ""]
    out += ["| size | jobs | " + " | ".join(run) + " |", "|---|---:|" + "---:|" * len(run)]
    for size, entry in summary["by_size"].items():
        cells = [f"{fmt(entry[w]['s_p50'])} / {fmt(entry[w]['busbw_mean_gbps'])}" for w in run]
        out.append(f"| {size} | {entry['jobs_running_every_way']} | " + " | ".join(cells) + " |")
    cpu = {w: report["ways"][w]["cpu_seconds"] for w in run if "cpu_seconds" in report["ways"][w]}
    if cpu:
        out += ["", "CPU seconds per component from submission until settled (this sandbox's processes only):", ""]
        out += cpu_table(cpu)
    out += ["", *report.get("notes", []), ""]
    if report.get("plot"):
        out += [f"![jobs Running over time]({report['plot']})", ""]
    return "\n".join(out)


def plot(report: dict[str, Any], path: Path) -> bool:
    title = f"{report['config']['jobs']} jobs, {report['nodes']} nodes"
    return plot_running(report["ways"], COLOURS, title, path)
