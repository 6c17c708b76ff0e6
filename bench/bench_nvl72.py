"""NVL72 racks: every placement policy replayed over 8 GB200 NVL72 racks (144 trays, 576 GPUs) and one mixed
trace, at two loads; and the estimator's rows against the published NVL72 nccl-tests figures.

Per policy: mean estimated bus bandwidth of multi-GPU jobs and of multi-tray jobs, the share of multi-tray
jobs kept inside one NVLink domain, GPU utilisation and mean wait. ``gputopo`` keeps 16 of a rack's 18 trays
in use at most (spares for failures); ``gputopo-cap18`` is the same engine without that reserve, to show
what it costs. The trace: Poisson arrivals, log-normal durations, 1-256 GPUs (4-GPU workers beyond one tray),
30% of the jobs over 32 GPUs asking for 8-rank NVLink slices. No exact optimum here (the exact solver does not
know NVLink domains). One run, fixed seeds.
Writes bench/reports/nvl72.{json,md,png}.  Run: python bench/bench_nvl72.py
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from gputopo.placement import place
from gputopo.placement.types import Policy, Snapshot, TierConfig
from gputopo.sim.generate import generate_nvl72_cluster, generate_trace
from gputopo.sim.policies import POLICIES
from gputopo.sim.simulation import PolicyReport, simulate
from gputopo.topology.calibration import calibrate_nvl72, format_table, median_error

REPORTS = Path(__file__).parent / "reports"
RACKS = 8
JOBS = 500
# (name, mean seconds between arrivals, seed): a lighter and a heavier load on the same cluster.
SCENARIOS: list[tuple[str, float, int]] = [("arrivals-240s", 240.0, 21), ("arrivals-160s", 160.0, 22)]


def policies() -> dict[str, tuple[Policy, int]]:
    """Each policy with the per-rack tray cap of the snapshot it runs on (only gputopo reads it)."""
    out: dict[str, tuple[Policy, int]] = {"gputopo": (POLICIES["gputopo"], 16), "gputopo-cap18": (place, 18)}
    out.update({name: (p, 16) for name, p in POLICIES.items() if name != "gputopo"})
    return out


def summarise(report: PolicyReport) -> dict[str, Any]:
    summary: dict[str, Any] = dict(report.summary())
    multi = [o for o in report.outcomes if o.nodes > 1]
    summary["mean_busbw_multi_tray_GBps"] = statistics.fmean(o.busbw_gbps for o in multi) if multi else None
    summary["multi_tray_jobs"] = len(multi)
    summary["mean_nvlink_domains_per_multi_tray_job"] = (
        statistics.fmean(o.nvlink_domains for o in multi) if multi else None
    )
    return summary


def plot(results: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(results)
    names = list(next(iter(results.values())))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.8 / len(scenarios)
    panels = (
        ("mean_busbw_GBps", "mean est. bus bandwidth, multi-GPU jobs (GB/s)"),
        ("mean_busbw_multi_tray_GBps", "mean est. bus bandwidth, multi-tray jobs (GB/s)"),
        ("gpu_utilisation", "GPU utilisation"),
    )
    for ax, (key, label) in zip(axes, panels, strict=True):
        for s, scenario in enumerate(scenarios):
            values = [results[scenario][n][key] or 0 for n in names]
            ax.bar([x + s * width for x in range(len(names))], values, width, label=scenario)
        ax.set_xticks([x + width * (len(scenarios) - 1) / 2 for x in range(len(names))], names, rotation=30)
        ax.set_ylabel(label)
    axes[2].set_ylim(0, 1)
    axes[0].legend()
    fig.suptitle(f"{RACKS} GB200 NVL72 racks, {JOBS}-job mixed trace")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    snap = generate_nvl72_cluster(RACKS)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    timings: dict[str, dict[str, float]] = {}
    for name, interarrival, seed in SCENARIOS:
        trace = generate_trace(
            random.Random(seed), JOBS, mean_interarrival=interarrival, gpus_per_node=4, slice_share=0.3
        )
        results[name], timings[name] = {}, {}
        for policy_name, (policy, cap) in policies().items():
            tiers = TierConfig(snap.tiers.levels, snap.tiers.beyond_top, domain_node_cap=cap)
            t0 = time.process_time()
            report = simulate(Snapshot(snap.nodes, tiers), trace, policy_name, policy, exact=False)
            timings[name][policy_name] = round(time.process_time() - t0, 2)
            results[name][policy_name] = summarise(report)
    calibration = calibrate_nvl72()
    doc = {
        "cluster": {"racks": RACKS, "trays": len(snap), "gpus": snap.total_gpus, "domain_node_cap": 16},
        "trace": {
            "jobs": JOBS,
            "gpus_per_node": 4,
            "slice_share": 0.3,
            "scenarios": [{"name": n, "mean_interarrival_s": i, "seed": s} for n, i, s in SCENARIOS],
        },
        "results": results,
        "cpu_seconds": timings,
        "calibration": [
            {
                "row": r.row,
                "system": r.system,
                "published_GBps": r.published,
                "predicted_GBps": r.predicted,
                "error": r.error,
                "set_aside": r.set_aside,
            }
            for r in calibration
        ],
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
    }
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "nvl72.json").write_text(json.dumps(doc, indent=2))
    lines = [
        f"# NVL72 racks: {RACKS} GB200 NVL72 racks ({len(snap)} trays, {snap.total_gpus} GPUs), {JOBS}-job mixed trace",
        "",
        "Produced by `python bench/bench_nvl72.py` (one run, fixed seeds). Bus bandwidths are the estimator's",
        "(`gputopo.topology.gang`), not measurements. `gputopo` keeps at most 16 of each rack's 18 trays in use;",
        "`gputopo-cap18` is the same engine with no spares.",
        "",
        "| load | policy | mean busbw multi-GPU GB/s | mean busbw multi-tray GB/s | multi-tray jobs in one domain "
        "| domains per multi-tray job | GPU util | mean wait s | placed | CPU s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sc, per in results.items():
        for name, s in per.items():
            one = s["share_multi_node_in_one_nvlink_domain"]
            multi = s["mean_busbw_multi_tray_GBps"]
            spread = s["mean_nvlink_domains_per_multi_tray_job"]
            lines.append(
                f"| {sc} | {name} | {s['mean_busbw_GBps']:.1f} | {'-' if multi is None else f'{multi:.1f}'} | "
                f"{'-' if one is None else f'{one:.2f}'} | {'-' if spread is None else f'{spread:.2f}'} | "
                f"{s['gpu_utilisation']:.3f} | {s['mean_wait_s']:.0f} | {s['jobs_placed']} | {timings[sc][name]} |"
            )
    lines += ["", "## Reading", ""]
    for sc, per in results.items():
        ours = per["gputopo"]
        peers = {n: v for n, v in per.items() if not n.startswith("gputopo")}
        best = max(peers, key=lambda n: peers[n]["mean_busbw_multi_tray_GBps"] or 0)
        theirs = peers[best]
        gain = (ours["mean_busbw_multi_tray_GBps"] or 0) / (theirs["mean_busbw_multi_tray_GBps"] or 1) - 1
        lines.append(
            f"- {sc}: gputopo's multi-tray jobs average {ours['mean_busbw_multi_tray_GBps']:.0f} GB/s, {gain:+.1%} "
            f"against the best peer ({best}, {theirs['mean_busbw_multi_tray_GBps']:.0f}); its GPU utilisation is "
            f"{ours['gpu_utilisation']:.3f} against {theirs['gpu_utilisation']:.3f} and its mean wait "
            f"{ours['mean_wait_s']:.0f} s against {theirs['mean_wait_s']:.0f} s. Without the spare trays "
            f"(gputopo-cap18): {per['gputopo-cap18']['mean_busbw_multi_tray_GBps']:.0f} GB/s, utilisation "
            f"{per['gputopo-cap18']['gpu_utilisation']:.3f}, wait {per['gputopo-cap18']['mean_wait_s']:.0f} s."
        )
    lines += [
        "",
        "The spares and the balanced slices are paid for in waiting: a gang waits for room to split evenly",
        "(or for a rack under its cap) where the greedy peers take an uneven split at once.",
        "",
        "## The estimator against published NVL72 figures",
        "",
        "nccl-tests `all_reduce_perf` bus bandwidth, large messages; sources in",
        "`operator/gputopo/topology/fixtures/nvl72-busbw-calibration.tsv`.",
        "",
        format_table(calibration),
        "",
        f"Median absolute error of the NVL72 rows: {median_error(calibration):.1%}.",
    ]
    (REPORTS / "nvl72.md").write_text("\n".join(lines) + "\n")
    plot(results, REPORTS / "nvl72.png")
    print((REPORTS / "nvl72.md").read_text())


if __name__ == "__main__":
    main()
