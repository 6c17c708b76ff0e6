"""The report of ``bench_operator.py``: the two sides summed up and paired job by job, by job size, the
operator's memory, and the plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gang_trace import SIZES, Job
from operator_memory import GOAL_RSS_MB
from reporting import fmt, mean, median, percentile, pyplot, step_running

__all__ = ["markdown", "plot", "summarise"]


def summarise(speed: dict[str, Any], trace: Sequence[Job]) -> dict[str, Any]:
    kube, ours = speed["kube-scheduler"], speed["gputopo"]
    both = [j for j in trace if kube["jobs"][j.name]["running"] and ours["jobs"][j.name]["running"]]
    # One GPU does no all-reduce: its "bus bandwidth" says nothing, so 1-GPU jobs stay out of the averages.
    multi = [j for j in both if j.gpus > 1]

    def side(s: dict[str, Any]) -> dict[str, Any]:
        up = [j for j in trace if s["jobs"][j.name]["running"]]
        times = [s["jobs"][j.name]["seconds"] for j in up]
        up_multi = [j for j in up if j.gpus > 1]
        bw = [s["jobs"][j.name]["busbw_gbps"] for j in up_multi]
        common_t = [s["jobs"][j.name]["seconds"] for j in both]
        common_bw = [s["jobs"][j.name]["busbw_gbps"] for j in multi]
        return {
            "jobs_running": len(up),
            "gpus_in_running_jobs": sum(j.gpus for j in up),
            "all_that_run_running_s": max(times) if times else None,
            "common_jobs_all_running_s": max(common_t) if common_t else None,
            "per_job_s_p50": median(times),
            "per_job_s_p90": percentile(times, 0.9) if times else None,
            "common_per_job_s_p50": median(common_t),
            "busbw_mean_gbps": mean(bw),
            "busbw_gpu_weighted_gbps": (
                sum(b * j.gpus for b, j in zip(bw, up_multi, strict=True)) / sum(j.gpus for j in up_multi)
            )
            if up_multi
            else None,
            "common_busbw_mean_gbps": mean(common_bw),
        }

    a, b = side(ours), side(kube)
    paired_t = [
        ours["jobs"][j.name]["seconds"] / kube["jobs"][j.name]["seconds"]
        for j in both
        if kube["jobs"][j.name]["seconds"] > 0
    ]
    paired_bw = [
        ours["jobs"][j.name]["busbw_gbps"] / kube["jobs"][j.name]["busbw_gbps"]
        for j in multi
        if kube["jobs"][j.name]["busbw_gbps"] > 0
    ]
    by_size: dict[str, dict[str, Any]] = {}
    for shape in SIZES:
        jobs = [j for j in trace if (j.workers, j.gpus_per_worker) == shape]
        key = f"{shape[0]}x{shape[1]}"
        entry: dict[str, Any] = {"jobs": len(jobs)}
        for name, s in (("gputopo", ours), ("kube", kube)):
            up = [s["jobs"][j.name] for j in jobs if s["jobs"][j.name]["running"]]
            entry[f"{name}_running"] = len(up)
            entry[f"{name}_s_p50"] = median([r["seconds"] for r in up])
            entry[f"{name}_busbw_p50"] = median([r["busbw_gbps"] for r in up])
        common = [j for j in jobs if j in both]
        entry["common"] = len(common)
        # ratio of the means over the jobs Running on both sides (a mean of ratios is ruled by tiny divisors)
        mean_ours = mean([ours["jobs"][j.name]["busbw_gbps"] for j in common])
        mean_kube = mean([kube["jobs"][j.name]["busbw_gbps"] for j in common])
        entry["busbw_ratio_common_mean"] = (
            mean_ours / mean_kube if mean_ours is not None and mean_kube and shape[0] * shape[1] > 1 else None
        )
        by_size[key] = entry
    deltas = [
        abs(r["busbw_gbps"] - r["operator_busbw_gbps"])
        for r in ours["jobs"].values()
        if r["running"] and r.get("operator_busbw_gbps") is not None
    ]

    def ratio(x: float | None, y: float | None) -> float | None:
        return x / y if x is not None and y else None

    return {
        "gputopo": a,
        "kube-scheduler": b,
        "jobs_running_on_both": len(both),
        "multi_gpu_jobs_running_on_both": len(multi),
        "ratio_time_all_that_run": ratio(a["all_that_run_running_s"], b["all_that_run_running_s"]),
        "ratio_time_common_jobs": ratio(a["common_jobs_all_running_s"], b["common_jobs_all_running_s"]),
        "ratio_time_per_job_p50": median(paired_t),
        "ratio_busbw_common_mean": ratio(a["common_busbw_mean_gbps"], b["common_busbw_mean_gbps"]),
        "ratio_busbw_per_job_p50": median(paired_bw),
        "by_size": by_size,
        "operator_vs_recomputed_busbw_max_abs_gbps": max(deltas) if deltas else None,
    }


def plot(report: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    speed, memory, summary = report["speed"], report.get("memory"), report["summary"]
    fig, axes = plt.subplots(1, 3 if memory else 2, figsize=(16 if memory else 11, 4.2))
    ax = axes[0]
    for name, colour in (("gputopo", "tab:blue"), ("kube-scheduler", "tab:orange")):
        step_running(ax, speed[name]["jobs"], name, colour)
    ax.set_title(f"{report['config']['jobs']} jobs, {speed['nodes']} nodes")
    ax.legend()
    ax = axes[1]
    sizes = list(summary["by_size"])
    xs = range(len(sizes))
    g = [summary["by_size"][s]["gputopo_busbw_p50"] or 0 for s in sizes]
    k = [summary["by_size"][s]["kube_busbw_p50"] or 0 for s in sizes]
    ax.bar([x - 0.2 for x in xs], g, 0.4, label="gputopo", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], k, 0.4, label="kube-scheduler", color="tab:orange")
    ax.set_xticks(list(xs), sizes)
    ax.set_xlabel("workers x GPUs per worker")
    ax.set_ylabel("median estimated bus bandwidth (GB/s)")
    ax.legend()
    if memory:
        ax = axes[2]
        series = memory["series"]
        ax.plot([p["t"] for p in series], [p["rss_mib"] for p in series], color="tab:green")
        ax.axhline(GOAL_RSS_MB / 1.048576, color="tab:red", linestyle="--", label="150 MB goal")
        ax.set_xlabel("seconds since the control loop started")
        ax.set_ylabel("operator VmRSS (MiB)")
        ax.set_title(f"{memory['nodes']} nodes, {memory['jobs']} jobs")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(report: dict[str, Any]) -> str:
    cfg, speed, s = report["config"], report["speed"], report["summary"]
    kube, ours = speed["kube-scheduler"], speed["gputopo"]
    g, k = s["gputopo"], s["kube-scheduler"]
    demand = cfg["demand_gpus"]
    lines = [
        "# Operator: time to Running, bus bandwidth, memory",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}",
        "",
        f"## {cfg['jobs']} TrainingJobs on a {speed['nodes']}-node `mixed` sandbox",
        "",
        f"Trace (seed {cfg['seed']}): {', '.join(f'{n} of {size}' for size, n in cfg['trace_sizes'].items())} "
        f"(workers x GPUs per worker) — {demand} GPUs asked of {speed['gpus']} "
        f"({demand / speed['gpus']:.0%} of capacity; {speed['nodes'] - speed['node_types'].get('l40s-pcie', 0)} "
        "nodes have 8 GPUs, the L40S nodes 4). Each side gets the whole trace in one `kubectl create` of a List "
        "into a fresh namespace; times are from the start of that call.",
        "",
        "| | gputopo | kube-scheduler alone | ratio |",
        "|---|---|---|---|",
        f"| objects submitted (submit time) | {ours['objects_submitted']} TrainingJobs "
        f"({ours['submit_seconds']:.1f} s) "
        f"| {kube['objects_submitted']} pods ({kube['submit_seconds']:.1f} s) | |",
        f"| jobs with every pod Running | {g['jobs_running']} | {k['jobs_running']} | |",
        f"| GPUs in those jobs | {g['gpus_in_running_jobs']} | {k['gpus_in_running_jobs']} | |",
        f"| gangs partly Running (GPUs held idle) | {ours['partial_gangs']} ({ours['gpus_idle_in_partial_gangs']}) "
        f"| {kube['partial_gangs']} ({kube['gpus_idle_in_partial_gangs']}) | |",
        f"| time until every job that runs is Running (s) | {fmt(g['all_that_run_running_s'])} "
        f"| {fmt(k['all_that_run_running_s'])} | {fmt(s['ratio_time_all_that_run'], '.2f')} |",
        f"| time until the {s['jobs_running_on_both']} jobs Running on both sides are Running (s) "
        f"| {fmt(g['common_jobs_all_running_s'])} | {fmt(k['common_jobs_all_running_s'])} "
        f"| {fmt(s['ratio_time_common_jobs'], '.2f')} |",
        f"| per job, submission → all pods Running, p50 / p90 (s) | {fmt(g['per_job_s_p50'])} / "
        f"{fmt(g['per_job_s_p90'])} | {fmt(k['per_job_s_p50'])} / {fmt(k['per_job_s_p90'])} "
        f"| {fmt(s['ratio_time_per_job_p50'], '.2f')} (p50 of per-job ratios) |",
        f"| est. bus bandwidth, mean over multi-GPU jobs Running (GB/s) | {fmt(g['busbw_mean_gbps'])} "
        f"| {fmt(k['busbw_mean_gbps'])} | |",
        f"| est. bus bandwidth, GPU-weighted mean (GB/s) | {fmt(g['busbw_gpu_weighted_gbps'])} "
        f"| {fmt(k['busbw_gpu_weighted_gbps'])} | |",
        f"| est. bus bandwidth, mean over the {s['multi_gpu_jobs_running_on_both']} multi-GPU jobs Running on "
        f"both (GB/s) | {fmt(g['common_busbw_mean_gbps'])} "
        f"| {fmt(k['common_busbw_mean_gbps'])} | {fmt(s['ratio_busbw_common_mean'], '.2f')} "
        f"(per-job p50 {fmt(s['ratio_busbw_per_job_p50'], '.2f')}) |",
        "",
        "By job size (jobs Running on each side; medians):",
        "",
        "| size | jobs | Running gputopo / kube | time p50 gputopo / kube (s) | busbw p50 gputopo / kube (GB/s) "
        "| busbw ratio of means, jobs on both |",
        "|---|---|---|---|---|---|",
    ]
    for size, e in s["by_size"].items():
        lines.append(
            f"| {size} | {e['jobs']} | {e['gputopo_running']} / {e['kube_running']} | {fmt(e['gputopo_s_p50'])} / "
            f"{fmt(e['kube_s_p50'])} | {fmt(e['gputopo_busbw_p50'])} / {fmt(e['kube_busbw_p50'])} "
            f"| {fmt(e['busbw_ratio_common_mean'], '.2f')} ({e['common']}) |"
        )
    lines += [
        "",
        "How it was measured. A pod watch stamps when each pod is first seen bound and Running (kwok marks a bound "
        "pod Running at once; there are no containers). A job is Running when all its workers are. Demand is "
        "about the capacity, so not everything can run at once; each side is settled when all pods run or "
        f"nothing new started for {cfg['quiet_s']:.0f} s (gputopo: {ours['settled_because']}; kube-scheduler: "
        f"{kube['settled_because']}). The first ratio compares the time until everything that fits on each side "
        "is Running (the sides fit different sets of jobs); the second compares the same jobs, the ones Running "
        "on both sides. Ratios are gputopo ÷ kube-scheduler: below 1 is faster, above 1 is more bandwidth. "
        "Bus bandwidth averages leave out 1-GPU jobs (no all-reduce; the estimator's figure for one GPU is "
        "only shown in the 1x1 row).",
        "",
        "kube-scheduler alone gets one pod per worker with the same `nvidia.com/gpu` limit and nothing else. "
        "Without gang scheduling a multi-node job can start some of its workers and wait for the rest while "
        "they hold GPUs (the partial gangs above). Its GPUs per pod are the fake device plugin's best-effort "
        f"choice as the probes report it ({kube['pods_reported_by_probes']} of {kube['pods_running']} pods "
        f"reported; {kube['pods_gpus_from_lowest_free_indices']} took the lowest free indices instead). "
        "Both columns of bus bandwidth are `gputopo.topology.estimate_gang` on the nodes and GPUs the pods "
        "hold, the network part divided by the operator's default tier oversubscription (1 under one leaf, 2 "
        "under one spine, 4 beyond); for gputopo the figure the operator wrote into "
        "`status.placement.estimatedBusBandwidthGBps` differs from this by at most "
        f"{fmt(s['operator_vs_recomputed_busbw_max_abs_gbps'], '.2f')} GB/s, and "
        f"{ours['planned_gpus_differing_from_probe_report']} planned GPU sets differ from what the probes "
        "report the pods got.",
        "",
        f"Operator in part 1: control loop up {ours['control_loop_up_s']:.1f} s after start; VmRSS "
        f"{fmt(ours.get('operator_rss_mib'))} MiB (peak {fmt(ours.get('operator_hwm_mib'))} MiB) when settled; "
        f"job phases {ours['phases']}; log: {ours['operator_log']['error_lines']} error lines of "
        f"{ours['operator_log']['lines']}. Sandbox up in {speed['sandbox_up_s']:.0f} s.",
        "",
    ]
    memory = report.get("memory")
    if memory:
        mb = memory["steady_rss_mib"] * 1.048576
        steady = not str(memory["steady_because"]).startswith("deadline")
        when = "queue steady" if steady else "at the deadline (queue not yet steady)"
        lines += [
            f"## Operator memory: {memory['nodes']} nodes, {memory['jobs']} TrainingJobs",
            "",
            f"A separate {memory['nodes']}-node `mixed` sandbox, fake probes every {memory['probe_interval_s']} s, "
            f"the operator watching all namespaces; {memory['jobs']} jobs of {memory['job_shape']} GPUs submitted "
            f"at once ({memory['submit_seconds']:.1f} s to submit), read {memory['steady_after_s']:.0f} s after "
            f"submission began ({memory['steady_because']}, counted from the end of the submission) with "
            f"{memory['pods_running']} pods Running, job phases {memory['phases']}; "
            f"{memory.get('jobs_restarted', 0)} jobs restarted at least once; control loop up "
            f"{memory['control_loop_up_s']:.1f} s after the operator started.",
            "",
            "Jobs not Running, by phase and the reason of their `Placed` condition: "
            + (
                "; ".join(f"{k}: {v} jobs" for k, v in memory.get("not_running_reasons", {}).items())
                if memory.get("not_running_reasons")
                else "none"
            )
            + ".",
            "",
            "| operator process | VmRSS (MiB) | VmHWM (MiB) |",
            "|---|---|---|",
            f"| nodes only, {cfg['idle_s']:.0f} s after the control loop started | {memory['idle_rss_mib']:.1f} "
            f"| {memory['idle_hwm_mib']:.1f} |",
            f"| {memory['jobs']} jobs submitted, {when} | {memory['steady_rss_mib']:.1f} (max of "
            f"{cfg['steady_samples']} samples {memory['steady_rss_mib_max_of_samples']:.1f}) "
            f"| {memory['hwm_mib']:.1f} |",
            "",
            f"VmRSS {mb:.0f} MB at the last reading against the goal of ≤ {GOAL_RSS_MB:.0f} MB: "
            f"{'met' if mb <= GOAL_RSS_MB else 'not met'}; peak {memory['hwm_mib'] * 1.048576:.0f} MB. "
            f"Operator log: {memory['operator_log']['error_lines']} error lines of {memory['operator_log']['lines']}.",
            "",
        ]
    if report.get("plot"):
        lines += [f"![jobs Running over time, bus bandwidth by size, operator memory]({report['plot']})", ""]
    return "\n".join(lines)
