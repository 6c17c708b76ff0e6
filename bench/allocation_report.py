"""The report of ``bench_allocation.py``: the sides' table, where the time goes per stage, API and CPU counts,
the floor and the gap to kube-scheduler alone, an earlier report side by side, and the plot.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from allocation_side import SIDES, STAGES
from floor import FLOOR_SIDES
from reporting import fmt, pyplot, step_running

__all__ = ["markdown", "plot"]

# The stages timed per job, in order: their means add up to the mean time to Running.
TIMED = ("submit", "queue", "writes", "binding", "start")


def markdown(report: dict[str, Any]) -> str:
    cfg, res = report["config"], report["results"]
    sides = [s for s in SIDES if s in res]
    kube = res.get("kube-scheduler")
    kube_p50 = kube["time_per_job_s"]["p50"] if kube else None

    def ratio(side: str) -> str:
        p50 = res[side]["time_per_job_s"]["p50"]
        return fmt(p50 / kube_p50, ".2f") + " x" if kube_p50 and p50 is not None else "-"

    lines = [
        "# GPU allocation: time to Running, bus bandwidth, plan = reality",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}; run took {report['bench_wall_s']:.0f} s",
        "",
        f"{cfg['jobs']} jobs (trace of `bench_operator.py`, seed {cfg['seed']}: "
        f"{', '.join(f'{n} of {size}' for size, n in cfg['trace_sizes'].items())}; {cfg['demand_gpus']} GPUs) on "
        f"a {res.get('nodes')}-node `mixed` sandbox ({res.get('gpus')} GPUs). Each side gets the whole trace in "
        "one `kubectl create`; times count from the start of that call.",
        "",
        "| | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
        "| jobs with every pod Running | "
        + " | ".join(f"{res[s]['jobs_running']} of {cfg['jobs']}" for s in sides)
        + " |",
        "| per job to Running p50 / p90 / max (s) | "
        + " | ".join(
            f"{fmt(res[s]['time_per_job_s']['p50'])} / {fmt(res[s]['time_per_job_s']['p90'])} / "
            f"{fmt(res[s]['time_per_job_s']['max'])}"
            for s in sides
        )
        + " |",
        "| p50 against kube-scheduler alone | " + " | ".join(ratio(s) for s in sides) + " |",
        "| whole trace Running (s) | " + " | ".join(fmt(res[s]["time_whole_trace_s"]) for s in sides) + " |",
        "| est. bus bandwidth, mean of multi-GPU jobs (GB/s) | "
        + " | ".join(fmt(res[s]["busbw_mean_gbps"]) for s in sides)
        + " |",
        "| est. bus bandwidth, GPU-weighted (GB/s) | "
        + " | ".join(fmt(res[s]["busbw_gpu_weighted_gbps"]) for s in sides)
        + " |",
        "| ranks whose real GPUs equal the plan | "
        + " | ".join(
            "no plan"
            if s == "kube-scheduler"
            else f"{res[s]['ranks_as_planned']} of {res[s]['ranks_compared']} "
            f"({fmt(100 * (res[s]['share_as_planned'] or 0))} %)"
            for s in sides
        )
        + " |",
        "| partly Running gangs | " + " | ".join(str(res[s]["partial_gangs"]) for s in sides) + " |",
        "",
        "Where the time goes, per job Running (seconds; p50 / mean — means add up to the mean time to Running):",
        "",
        "| stage | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    names = {
        "submit": "submit (kubectl create → object seen)",
        "queue": "queue wait (seen → plan, less the planner)",
        "planning": "planning (planner call, mean per decision)",
        "writes": "API writes (plan → last pod created)",
        "binding": "binding (→ last pod bound)",
        "start": "start (→ last pod Running)",
    }
    for stage in STAGES:
        cells = []
        for s in sides:
            entry = res[s]["stages"].get(stage)
            if entry is None:
                cells.append("-")
            elif stage == "planning":
                cells.append(f"{entry['per_decision_mean_s'] * 1000:.1f} ms ({entry['decisions']:.0f} decisions)")
            else:
                cells.append(f"{fmt(entry['p50'], '.2f')} / {fmt(entry['mean'], '.2f')}")
        lines.append(f"| {names[stage]} | " + " | ".join(cells) + " |")
    lines.append(
        "| of the queue wait: a placed gang's wait for an API slot (mean) | "
        + " | ".join(
            f"{res[s]['stages']['slot_wait']['mean_s']:.2f}" if "slot_wait" in res[s]["stages"] else "-" for s in sides
        )
        + " |"
    )
    lines.append(
        "| control passes (count, total s) | "
        + " | ".join(
            f"{res[s]['stages']['passes']['count']:.0f}, {res[s]['stages']['passes']['total_s']:.1f}"
            if "passes" in res[s]["stages"]
            else "-"
            for s in sides
        )
        + " |"
    )
    lines.append(
        "| API server writes while settling (all clients) | "
        + " | ".join(f"{res[s]['api_writes_total']}" for s in sides)
        + " |"
    )
    checks = []
    for s in sides:
        c = res[s]["clock_check"]["bound_minus_PodScheduled_s"]
        checks.append(f"{s} {fmt(c['min'], '.2f')} to {fmt(c['max'], '.2f')} s")
    lines += [
        "",
        "Stage times are watch stamps (this process's monotonic clock at arrival), per job the last of its pods; "
        "the planner's own time is the operator's `gputopo_placement_decision_seconds` histogram. Watch stamp "
        "of binding minus the API server's whole-second `PodScheduled` time: " + "; ".join(checks) + ".",
        "",
        "Real GPUs: devicePlugin sides from the probes' PodResources report (NodePodGpus `status.pods`; "
        + ", ".join(f"{s}: {res[s]['pods_with_real_gpus']} pods reported" for s in sides if s != "dra")
        + "), dra from each rank's ResourceClaim allocation. Bus bandwidth is one estimator "
        "(`gputopo.topology.estimate_gang`) on those GPUs for every side; 1-GPU jobs stay out of the means.",
        "",
    ]
    counts = (
        (
            "api_writes",
            "API server writes by verb and resource (`apiserver_request_total`, from before the submission until "
            "the side settled; kube-scheduler's bindings, kwok's pod status updates and the probes' reports count "
            "too):",
        ),
        ("api_reads", "Reads, the same way:"),
        (
            "watch_events",
            "Watch events the API server sent, by resource (`apiserver_watch_events_total`; nodes and leases are "
            "the sandbox's background):",
        ),
    )
    for key, title in counts:
        lines += [title, ""]
        for s in sides:
            top = ", ".join(f"{k} {v}" for k, v in list((res[s].get(key) or {}).items())[:8])
            lines.append(f"- {s}: {top}")
        lines.append("")
    lines += [
        "CPU seconds per component from the submission until the side settled (`/proc/<pid>/stat`, user + "
        "system; the machine has "
        f"{os.cpu_count()} CPUs):",
        "",
    ]
    for s in sides:
        used = res[s].get("cpu_seconds") or {}
        total = sum(used.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in used.items())
        lines.append(f"- {s}: {total:.1f} in {res[s]['settled_after_s']:.1f} s — {parts}")
    lines.append("")
    for s in sides:
        r = res[s]
        extra = ""
        if s in FLOOR_SIDES:
            failed = r.get("replay_errors") or []
            extra = f"; job phases {r['phases']}; writes failed: {len(failed)}" + (f" ({failed[0]})" if failed else "")
        elif s != "kube-scheduler":
            extra = (
                f"; job phases {r['phases']}; {r['generations_above_1']} jobs re-planned; operator log "
                f"{r['operator_log']['error_lines']} error lines of {r['operator_log']['lines']}"
            )
        waits = "; ".join(f"{k}: {v}" for k, v in r.get("not_running", {}).items())
        extra += f"; not Running: {waits}" if waits else ""
        lines.append(f"- {s}: settled after {r['settled_after_s']:.1f} s ({r['settled_because']}){extra}.")
    lines += remaining(report)
    before = report.get("before")
    if before:
        lines += ["", *compare(before, report), ""]
    if report.get("plot"):
        lines += ["", f"![jobs Running over time; stage means]({report['plot']})"]
    return "\n".join(lines) + "\n"


def floor_lines(res: Mapping[str, Any], kube: Mapping[str, Any]) -> list[str]:
    """The floor sides against kube-scheduler alone and the operator: what the writes alone take here."""
    kube_p50 = kube["time_per_job_s"]["p50"]
    floors = [s for s in FLOOR_SIDES if s in res and res[s]["time_per_job_s"]["p50"] is not None]
    if not floors or not kube_p50:
        return []
    said = {
        "replay": "the operator's writes, write for write, by a client that decides nothing",
        "minimal": "one status write per job, Running with the placement, none before the pods",
        "pinned": "no status at all",
    }
    lines = ["The floor: the same placements written with no operator (`bench/floor.py`); p50 to Running:", ""]
    for s in floors:
        r = res[s]
        p50 = r["time_per_job_s"]["p50"]
        cpu = sum((r.get("cpu_seconds") or {}).values())
        lines.append(
            f"- {s} ({said[s]}): {p50:.2f} s, {p50 / kube_p50:.2f} x kube-scheduler alone; "
            f"{r['api_writes_total']} API writes, {cpu:.1f} CPU-s"
        )
    lines += [""]
    lines.append(
        "The floor client keeps no node turns (the operator lets a gang's pods out on a node only once the gang "
        "before has been bound there), so the device plugin's choice can differ from the plan on a node two gangs "
        "share."
    )
    return [*lines, ""]


def remaining(report: dict[str, Any]) -> list[str]:
    """Where gputopo's time goes beyond kube-scheduler alone's, from this run's figures."""
    res, jobs = report["results"], report["config"]["jobs"]
    kube = res.get("kube-scheduler")
    if kube is None:
        return []
    lines = ["", "What the gap to kube-scheduler alone is made of, per side (means per job Running):", ""]
    lines += floor_lines(res, kube)
    for side in ("devicePlugin", "dra"):
        r = res.get(side)
        if r is None:
            return lines
        st = r["stages"]
        mean = statistics.fmean(j["seconds"] for j in r["jobs"].values() if j["running"])
        kube_mean = statistics.fmean(j["seconds"] for j in kube["jobs"].values() if j["running"])
        planner = st["planning"]["per_decision_mean_s"] if "planning" in st else 0.0
        decisions = st["planning"]["decisions"] if "planning" in st else 0.0
        later = sum((st.get(k) or {}).get("mean") or 0.0 for k in TIMED[2:])
        slot = (st.get("slot_wait") or {}).get("mean_s")
        waited = f", of which {slot:.2f} s waiting for an API slot once planned" if slot is not None else ""
        lines.append(
            f"- {side}: {mean:.1f} s against {kube_mean:.1f} s. Queue wait {fmt(st['queue']['mean'])} s{waited}: the "
            f"jobs ahead being planned one after another ({decisions:.0f} planner calls of {planner * 1000:.1f} ms, "
            f"{decisions * planner:.1f} s in all) and written, {fmt(st['passes']['count'], '.0f')} control passes "
            f"taking {fmt(st['passes']['total_s'])} s (the writes go out beside them); plan to Running {later:.2f} s. "
            "The API server "
            f"took {r['api_writes_total']} writes against {kube['api_writes_total']} for kube-scheduler alone "
            f"({(r['api_writes_total'] - kube['api_writes_total']) / jobs:.1f} more per job)."
        )
    return lines


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Per side, the figures of an earlier report (``--before``) next to this one's."""
    old, new = before["results"], after["results"]
    sides = [s for s in SIDES if s in old and s in new]
    lines = [
        f"## Before and after: `{before['command']}` against `{after['command']}`",
        "",
        f"Before: {before.get('code', 'an earlier tree')}. After: {after.get('code', 'this tree')}.",
        "",
        "| | " + " | ".join(f"{s} before | {s} after" for s in sides) + " |",
        "|---|" + "---|---|" * len(sides),
    ]

    def row(label: str, value: Any) -> str:
        return f"| {label} | " + " | ".join(f"{value(old[s])} | {value(new[s])}" for s in sides) + " |"

    def ratio(res: dict[str, Any], side: dict[str, Any]) -> str:
        kube = res.get("kube-scheduler", {}).get("time_per_job_s", {}).get("p50")
        p50 = side["time_per_job_s"]["p50"]
        return fmt(p50 / kube, ".2f") if kube and p50 is not None else "-"

    lines.append(row("per job p50 (s)", lambda r: fmt(r["time_per_job_s"]["p50"])))
    lines.append(row("whole trace (s)", lambda r: fmt(r["time_whole_trace_s"])))
    lines.append(
        "| p50 ÷ kube-scheduler p50 of the same run | "
        + " | ".join(f"{ratio(old, old[s])} | {ratio(new, new[s])}" for s in sides)
        + " |"
    )
    for stage in TIMED:
        lines.append(row(f"{stage}, mean (s)", lambda r, st=stage: fmt((r["stages"].get(st) or {}).get("mean"), ".2f")))
    lines.append(
        row(
            "planner, mean per decision (ms)",
            lambda r: fmt(1000 * r["stages"]["planning"]["per_decision_mean_s"]) if "planning" in r["stages"] else "-",
        )
    )
    lines.append(row("API server writes", lambda r: str(r.get("api_writes_total", "-"))))
    return lines


def plot(report: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    res = report["results"]
    sides = [s for s in SIDES if s in res]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for s in sides:
        step_running(axes[0], res[s]["jobs"], s)
    axes[0].legend()
    bottom = [0.0] * len(sides)
    for stage in TIMED:
        heights = [(res[s]["stages"].get(stage) or {}).get("mean") or 0.0 for s in sides]
        axes[1].bar(sides, heights, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes[1].set_ylabel("mean seconds per job to Running")
    axes[1].tick_params(axis="x", labelrotation=20)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
