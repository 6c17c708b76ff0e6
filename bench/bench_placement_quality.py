"""Placement quality: policies replayed over the same fragmented mixed clusters and traces.

Per policy: mean estimated bus bandwidth of multi-GPU jobs and its ratio to the reference optimum (computed
on the snapshot each job saw by ``gputopo.placement.exact``: an exhaustive search on small instances, an ILP
solved by HiGHS on the rest, sharing only the estimator with the engine), per job size where each policy
loses, and every job where gputopo's own engine fell short of the reference. One run, fixed seeds.
Writes bench/reports/placement_quality.{json,md,png}.  Run: python bench/bench_placement_quality.py
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from gputopo.cli.simulate import plot_quality
from gputopo.placement.generate import generate_cluster, generate_trace
from gputopo.placement.policies import POLICIES
from gputopo.placement.simulation import PolicyReport, simulate

REPORTS = Path(__file__).parent / "reports"
SCENARIOS = [
    {"name": "mixed-128-frag15", "nodes": 128, "used_share": 0.15, "jobs": 300, "seed": 11},
    {"name": "mixed-256-frag05", "nodes": 256, "used_share": 0.05, "jobs": 300, "seed": 12},
]


def by_size(report: PolicyReport) -> dict[str, float]:
    got: dict[int, float] = defaultdict(float)
    best: dict[int, float] = defaultdict(float)
    for o in report.outcomes:
        if o.gpus > 1 and o.optimum_gbps:
            got[o.gpus] += o.busbw_gbps
            best[o.gpus] += o.optimum_gbps
    return {str(size): round(got[size] / best[size], 3) for size in sorted(got)}


def shortfalls(report: PolicyReport) -> list[dict[str, Any]]:
    """Jobs placed below the reference optimum, worst first."""
    out = [
        {"job": o.job, "gpus": o.gpus, "nodes": o.nodes, "busbw_GBps": round(o.busbw_gbps, 3),
         "optimum_GBps": round(o.optimum_gbps, 3), "ratio": round(o.busbw_gbps / o.optimum_gbps, 4)}
        for o in report.outcomes
        if o.gpus > 1 and o.optimum_gbps and o.busbw_gbps < o.optimum_gbps * (1 - 1e-9)
    ]  # fmt: skip
    return sorted(out, key=lambda row: row["ratio"])


def main() -> None:
    results: dict[str, Any] = {}
    pooled: dict[str, list[PolicyReport]] = defaultdict(list)
    for sc in SCENARIOS:
        snap = generate_cluster(random.Random(sc["seed"]), sc["nodes"], used_share=sc["used_share"])
        trace = generate_trace(random.Random(sc["seed"] + 100), sc["jobs"], mean_interarrival=20, mean_duration=1800)
        results[sc["name"]] = {}
        for name, policy in POLICIES.items():
            report = simulate(snap, trace, name, policy)
            pooled[name].append(report)
            results[sc["name"]][name] = {
                **report.summary(),
                "ratio_by_job_gpus": by_size(report),
                "jobs_below_optimum": shortfalls(report),
            }
    overall: dict[str, dict[str, Any]] = {}
    for name, reports in pooled.items():
        rated = [o for r in reports for o in r.outcomes if o.gpus > 1 and o.optimum_gbps]
        comm = [o for r in reports for o in r.outcomes if o.gpus > 1]
        overall[name] = {
            "mean_busbw_GBps": sum(o.busbw_gbps for o in comm) / len(comm),
            "ratio_to_optimal": sum(o.busbw_gbps for o in rated) / sum(o.optimum_gbps or 0 for o in rated),
        }
    doc = {"scenarios": results, "overall": overall}
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "placement_quality.json").write_text(json.dumps(doc, indent=2))
    lines = [
        "# Placement quality",
        "",
        "| scenario | policy | mean busbw GB/s | ratio to optimum | multi-node in one leaf | util | mean wait s |",
        "|---|---|---|---|---|---|---|",
    ]
    for sc, per in results.items():
        for name, s in per.items():
            one = s["share_multi_node_in_one_tier"]
            lines.append(
                f"| {sc} | {name} | {s['mean_busbw_GBps']:.1f} | {s['ratio_to_optimal']:.3f} | "
                f"{'-' if one is None else f'{one:.2f}'} | {s['gpu_utilisation']:.2f} | {s['mean_wait_s']:.0f} |"
            )
    lines += ["", "Ratio to optimum by job size (GPUs), pooled per scenario:", ""]
    for sc, per in results.items():
        sizes = sorted({int(k) for s in per.values() for k in s["ratio_by_job_gpus"]})
        lines += [f"**{sc}**", "", "| policy | " + " | ".join(map(str, sizes)) + " |", "|---" * (len(sizes) + 1) + "|"]
        for name, s in per.items():
            lines.append(
                f"| {name} | " + " | ".join(str(s["ratio_by_job_gpus"].get(str(z), "-")) for z in sizes) + " |"
            )
        lines.append("")
    lines += ["Overall: " + ", ".join(f"{n} {v['ratio_to_optimal']:.3f}" for n, v in overall.items()), ""]
    lines += ["Where gputopo's engine falls short of the reference (multi-GPU jobs rated against it):", ""]
    for sc, per in results.items():
        own = per["gputopo"]
        short = own["jobs_below_optimum"]
        lines.append(f"**{sc}**: {len(short)} of {own['jobs_rated']} rated jobs below the optimum")
        if short:
            lines += ["", "| job | GPUs | nodes | busbw GB/s | optimum GB/s | ratio |", "|---|---|---|---|---|---|"]
            lines += [
                f"| {r['job']} | {r['gpus']} | {r['nodes']} | {r['busbw_GBps']} | {r['optimum_GBps']} | {r['ratio']} |"
                for r in short[:15]
            ]
        lines.append("")
    (REPORTS / "placement_quality.md").write_text("\n".join(lines) + "\n")
    plot_quality(overall, REPORTS / "placement_quality.png")
    print((REPORTS / "placement_quality.md").read_text())


if __name__ == "__main__":
    main()
