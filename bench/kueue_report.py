"""The report of ``bench_kueue.py``: each side summed up, the goals against Kueue's Topology-Aware Scheduling,
under Kueue's quota and against the floor client, and the plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gang_trace import SIZES, Job
from reporting import cpu_table, fmt, mean, median, plot_running, stats

__all__ = [
    "FLOOR",
    "FLOOR_UNDER_KUEUE",
    "GOAL_BUSBW",
    "GOAL_FLOOR",
    "GOAL_UNDER_KUEUE",
    "GPUTOPO",
    "KUBE",
    "SIDES",
    "TAS",
    "UNDER_KUEUE",
    "Goal",
    "goals",
    "markdown",
    "plot",
    "summarise",
]

KUBE = "kube-scheduler"
TAS = "Kueue TAS"
GPUTOPO = "gputopo"
UNDER_KUEUE = "gputopo under Kueue"
FLOOR = "minimal"
FLOOR_UNDER_KUEUE = "minimal under Kueue"
SIDES = (KUBE, TAS, GPUTOPO, UNDER_KUEUE, FLOOR, FLOOR_UNDER_KUEUE)
COLOURS = {
    KUBE: "tab:orange",
    TAS: "tab:red",
    GPUTOPO: "tab:green",
    UNDER_KUEUE: "tab:blue",
    FLOOR: "tab:gray",
    FLOOR_UNDER_KUEUE: "tab:olive",
}
GOAL_BUSBW = 1.3  # gputopo's mean bus bandwidth on multi-node jobs at least this many times Kueue TAS's
GOAL_UNDER_KUEUE = 1.2  # gputopo under Kueue's quota: its whole trace at most this many times gputopo's alone
GOAL_FLOOR = 1.25  # gputopo's p50 time to Running at most this many times the floor client's


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def _side(result: Mapping[str, Any], trace: Sequence[Job]) -> dict[str, Any]:
    rows = result["jobs"]
    up = [j for j in trace if rows[j.name]["running"]]
    times = stats([rows[j.name]["seconds"] for j in up])
    made = [rows[j.name]["workload_s"] for j in trace if "workload_s" in rows[j.name]]
    admitted = [rows[j.name]["admitted_s"] for j in trace if "admitted_s" in rows[j.name]]
    return {
        "kueue_workload_s": stats(made) if made else None,
        "kueue_admitted_s": stats(admitted) if admitted else None,
        "jobs_running": len(up),
        "gpus_in_running_jobs": sum(j.gpus for j in up),
        "time_to_running_s": times,
        "whole_trace_s": times["max"],
        "busbw_multi_gpu_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in up if j.gpus > 1]),
        "busbw_multi_node_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in up if j.workers > 1]),
        "idle_in_partial_gangs": result["idle_in_partial_gangs"],
        "partial_gangs_at_end": result["partial_gangs_at_end"],
        "api_writes_total": result.get("api_writes_total"),
        "cpu_seconds": result.get("cpu_seconds", {}),
    }


def summarise(sides: Mapping[str, Mapping[str, Any]], trace: Sequence[Job]) -> dict[str, Any]:
    """Each side's figures, the multi-node jobs Running under both gputopo and Kueue TAS with their mean bus
    bandwidth on each, and the goals."""
    summary: dict[str, Any] = {"sides": {s: _side(sides[s], trace) for s in SIDES if s in sides}}
    if GPUTOPO in sides and TAS in sides:
        both = [
            j
            for j in trace
            if j.workers > 1 and sides[GPUTOPO]["jobs"][j.name]["running"] and sides[TAS]["jobs"][j.name]["running"]
        ]
        summary["multi_node_both"] = {
            "jobs": len(both),
            GPUTOPO: mean([sides[GPUTOPO]["jobs"][j.name]["busbw_gbps"] for j in both]),
            TAS: mean([sides[TAS]["jobs"][j.name]["busbw_gbps"] for j in both]),
        }
    if FLOOR in sides and sides[FLOOR].get("paired_rounds"):
        summary["floor_rounds"] = sides[FLOOR]["paired_rounds"]
    summary["by_size"] = _by_size(sides, trace)
    summary["goals"] = [g.__dict__ for g in goals(summary)]
    return summary


def _by_size(sides: Mapping[str, Mapping[str, Any]], trace: Sequence[Job]) -> dict[str, Any]:
    """Per job size, on each side: the jobs Running, their p50 time to Running and mean bus bandwidth."""
    out: dict[str, Any] = {}
    for shape in SIZES:
        jobs = [j for j in trace if (j.workers, j.gpus_per_worker) == shape]
        entry: dict[str, Any] = {"jobs": len(jobs)}
        for side in (s for s in SIDES if s in sides):
            rows = [sides[side]["jobs"][j.name] for j in jobs if sides[side]["jobs"][j.name]["running"]]
            entry[side] = {
                "running": len(rows),
                "s_p50": median([r["seconds"] for r in rows]),
                "busbw_mean_gbps": mean([r["busbw_gbps"] for r in rows]),
            }
        out[f"{shape[0]}x{shape[1]}"] = entry
    return out


@dataclass(frozen=True)
class Goal:
    """One goal of the issue: what it asks, the measured figure (a ratio), and whether it is met; a goal whose
    sides did not run has no figure and is not met."""

    name: str
    text: str
    figure: str
    met: bool


def _time(summary: Mapping[str, Any], side: str, key: str) -> float | None:
    figures = summary["sides"].get(side)
    if figures is None:
        return None
    value: float | None = figures["whole_trace_s"] if key == "whole" else figures["time_to_running_s"][key]
    return value


def goals(summary: Mapping[str, Any]) -> list[Goal]:
    """The four goals, judged on ``summary`` (see ``summarise``)."""
    out = []
    p50 = (_time(summary, GPUTOPO, "p50"), _time(summary, TAS, "p50"))
    whole = (_time(summary, GPUTOPO, "whole"), _time(summary, TAS, "whole"))
    sooner = all(a is not None and b is not None and a < b for a, b in (p50, whole))
    out.append(
        Goal(
            "sooner than Kueue TAS",
            "gputopo reaches Running sooner than Kueue TAS, p50 and whole trace",
            f"p50 {fmt(p50[0])} against {fmt(p50[1])} s, whole trace {fmt(whole[0])} against {fmt(whole[1])} s",
            sooner,
        )
    )
    both = summary.get("multi_node_both") or {}
    busbw = _ratio(both.get(GPUTOPO), both.get(TAS))
    out.append(
        Goal(
            "bus bandwidth against Kueue TAS",
            f"gputopo's mean bus bandwidth on multi-node jobs ≥ {GOAL_BUSBW}x Kueue TAS's (jobs Running on both)",
            f"{fmt(busbw, '.2f')}x ({fmt(both.get(GPUTOPO))} against {fmt(both.get(TAS))} GB/s, "
            f"{both.get('jobs', 0)} jobs)",
            busbw is not None and busbw >= GOAL_BUSBW,
        )
    )
    under = _ratio(_time(summary, UNDER_KUEUE, "whole"), _time(summary, GPUTOPO, "whole"))
    admitted = (summary["sides"].get(UNDER_KUEUE) or {}).get("kueue_admitted_s")
    besides = f"; Kueue admitted the last Workload at {fmt(admitted['max'])} s" if admitted else ""
    floor_under = _ratio(_time(summary, FLOOR_UNDER_KUEUE, "whole"), _time(summary, FLOOR, "whole"))
    if floor_under is not None:  # what Kueue's protocol alone costs: the floor client under the quota and not
        besides += f"; the floor client under Kueue's quota takes {fmt(floor_under, '.2f')}x its time alone"
    out.append(
        Goal(
            "under Kueue quota",
            f"gputopo under Kueue's quota within {GOAL_UNDER_KUEUE}x gputopo alone, whole trace",
            f"{fmt(under, '.2f')}x ({fmt(_time(summary, UNDER_KUEUE, 'whole'))} against "
            f"{fmt(_time(summary, GPUTOPO, 'whole'))} s{besides})",
            under is not None and under <= GOAL_UNDER_KUEUE,
        )
    )
    out.append(_floor_goal(summary))
    return out


def _floor_goal(summary: Mapping[str, Any]) -> Goal:
    """Judged on the median of the rounds' p50 ratios where the run made several, else on its one round."""
    rounds = summary.get("floor_rounds") or [
        {
            "gputopo_p50": _time(summary, GPUTOPO, "p50"),
            "minimal_p50": _time(summary, FLOOR, "p50"),
            "gputopo_whole": _time(summary, GPUTOPO, "whole"),
            "minimal_whole": _time(summary, FLOOR, "whole"),
        }
    ]
    ratios = [_ratio(r["gputopo_p50"], r["minimal_p50"]) for r in rounds]
    wholes = [_ratio(r["gputopo_whole"], r["minimal_whole"]) for r in rounds]
    known = [r for r in ratios if r is not None]
    floor = median(known) if len(known) == len(ratios) else None
    whole = median([w for w in wholes if w is not None])
    if len(rounds) == 1:
        figure = f"{fmt(floor, '.2f')}x (whole trace {fmt(whole, '.2f')}x)"
    else:
        each = "; ".join(f"{fmt(r['gputopo_p50'])} against {fmt(r['minimal_p50'])} s" for r in rounds)
        figure = (
            f"{fmt(floor, '.2f')}x, the median of {len(rounds)} rounds "
            f"({', '.join(fmt(r, '.2f') + 'x' for r in ratios)}: {each}; whole trace median {fmt(whole, '.2f')}x)"
        )
    return Goal(
        "against the floor client",
        f"gputopo's p50 time to Running ≤ {GOAL_FLOOR}x the floor client's ('minimal')",
        figure,
        floor is not None and floor <= GOAL_FLOOR,
    )


def _table(report: Mapping[str, Any]) -> list[str]:
    sides, results, jobs = report["summary"]["sides"], report["sides"], report["config"]["jobs"]
    run = [s for s in SIDES if s in sides]
    lines = ["| | " + " | ".join(run) + " |", "|---|" + "---:|" * len(run)]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(s) for s in run) + " |")

    def t(side: str) -> Mapping[str, float | None]:
        times: Mapping[str, float | None] = sides[side]["time_to_running_s"]
        return times

    row("jobs Running (of the trace)", lambda s: f"{sides[s]['jobs_running']}/{jobs}")
    row("GPUs in Running jobs", lambda s: str(sides[s]["gpus_in_running_jobs"]))
    row("time to Running per job p50 / p90 (s)", lambda s: f"{fmt(t(s)['p50'])} / {fmt(t(s)['p90'])}")
    row("whole trace: last job Running (s)", lambda s: fmt(sides[s]["whole_trace_s"]))

    def workload(key: str) -> Any:
        def cell(side: str) -> str:
            times = sides[side].get(key)
            return f"{fmt(times['p50'])} / {fmt(times['max'])}" if times else "-"

        return cell

    if any(sides[s].get("kueue_admitted_s") for s in run):
        row("gputopo made the job's Workload, p50 / last (s)", workload("kueue_workload_s"))
        row("Kueue admitted it, p50 / last (s)", workload("kueue_admitted_s"))
    row("bus bandwidth, mean of multi-node jobs (GB/s)", lambda s: fmt(sides[s]["busbw_multi_node_mean_gbps"]))
    row("bus bandwidth, mean of multi-GPU jobs (GB/s)", lambda s: fmt(sides[s]["busbw_multi_gpu_mean_gbps"]))
    row("idle in partial gangs (GPU·s)", lambda s: fmt(sides[s]["idle_in_partial_gangs"]["gpu_seconds"]))
    row("idle in partial gangs, peak (GPUs)", lambda s: fmt(sides[s]["idle_in_partial_gangs"]["peak_gpus"], ".0f"))
    row("partial gangs when settled", lambda s: str(sides[s]["partial_gangs_at_end"]))
    row("API writes while the side ran", lambda s: str(sides[s]["api_writes_total"]))
    row("settled after (s)", lambda s: f"{fmt(results[s]['settled_after_s'])} ({results[s]['settled_because']})")
    row("`kubectl create` of the trace (s)", lambda s: fmt(results[s]["submit_seconds"]))
    return lines


def _cpu_table(report: Mapping[str, Any]) -> list[str]:
    sides = report["summary"]["sides"]
    return cpu_table({s: sides[s]["cpu_seconds"] for s in SIDES if s in sides})


def markdown(report: Mapping[str, Any]) -> str:
    summary, config = report["summary"], report["config"]
    load = report["host_load"]
    size = "" if config["full_size"] else " — SMALL SIZE, not the benchmark's 200 jobs on 256 nodes"
    out = [
        f"# Beside Kueue: gputopo and Kueue's Topology-Aware Scheduling on one sandbox{size}",
        "",
        f"`{report['command']}` — {report['machine']}; {report['nodes']} nodes ({report['gpus']} GPUs, profile "
        f"`mixed`, Kueue {report['kueue_version']}), {config['jobs']} jobs (seed {config['seed']}, "
        f"{config['demand_gpus']} GPUs asked), settled after {config['quiet_s']:.0f} s without a new pod Running "
        f"(at most {config['deadline_s']:.0f} s). Whole run {report['bench_wall_s']:.0f} s. Host load average "
        f"(1, 5, 15 min): {' / '.join(f'{x:.2f}' for x in load['before'])} before, "
        f"{' / '.join(f'{x:.2f}' for x in load['after'])} after.",
        "",
        *_table(report),
        "",
        "**Goals.**",
        "",
    ]
    for goal in summary["goals"]:
        out.append(f"- {goal['text']}: **{'met' if goal['met'] else 'missed'}**, {goal['figure']}.")
    run = [s for s in SIDES if s in summary["sides"]]
    out += ["", "By job size: jobs Running, p50 time to Running (s), mean bus bandwidth (GB/s):", ""]
    out += ["| size | jobs | " + " | ".join(run) + " |", "|---|---:|" + "---:|" * len(run)]
    for size, entry in summary["by_size"].items():
        cells = [f"{e['running']}, {fmt(e['s_p50'])} s, {fmt(e['busbw_mean_gbps'])}" for e in (entry[s] for s in run)]
        out.append(f"| {size} | {entry['jobs']} | " + " | ".join(cells) + " |")
    out += ["", "CPU seconds per component while each side ran (this sandbox's processes only):", ""]
    out += [*_cpu_table(report), ""]
    out += ["API writes by verb and resource (`apiserver_request_total`, all clients, while each side ran):", ""]
    for side, result in report["sides"].items():
        top = ", ".join(f"{k} {v}" for k, v in list(result.get("api_writes", {}).items())[:10])
        out.append(f"- {side}: {top}")
    out += ["", *report.get("notes", []), ""]
    if report.get("plot"):
        out += [f"![jobs Running over time]({report['plot']})", ""]
    return "\n".join(out)


def plot(report: Mapping[str, Any], path: Path) -> bool:
    title = f"{report['config']['jobs']} jobs, {report['nodes']} nodes, beside Kueue"
    return plot_running(report["sides"], COLOURS, title, path)
