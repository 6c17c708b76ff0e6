"""Placement quality: policies replayed over the same fragmented mixed clusters and traces.

Per policy: mean estimated bus bandwidth of multi-GPU jobs and its ratio to the exact optimum (computed
on the snapshot each job saw), and per job size where each peer loses. One run, fixed seeds.
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
            results[sc["name"]][name] = {**report.summary(), "ratio_by_job_gpus": by_size(report)}
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
    lines += ["Overall: " + ", ".join(f"{n} {v['ratio_to_optimal']:.3f}" for n, v in overall.items())]
    (REPORTS / "placement_quality.md").write_text("\n".join(lines) + "\n")
    plot_quality(overall, REPORTS / "placement_quality.png")
    print((REPORTS / "placement_quality.md").read_text())


if __name__ == "__main__":
    main()
