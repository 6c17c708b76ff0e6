"""Placement quality: policies replayed over the same fragmented mixed clusters and traces.

Per policy: mean estimated bus bandwidth of multi-GPU jobs and its ratio to the reference optimum (computed
on the snapshot each job saw by ``gputopo.sim.exact``: an exhaustive search on small instances, an ILP
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

from gputopo.api.trainingjob import IntraNode
from gputopo.cli.simulate import plot_quality
from gputopo.placement import NodeInfo, Placement, Request, Snapshot, place
from gputopo.sim.exact import exhaustive_optimum, exhaustive_size
from gputopo.sim.generate import generate_cluster, generate_trace
from gputopo.sim.policies import POLICIES
from gputopo.sim.simulation import PolicyReport, simulate
from gputopo.topology.catalog import NODE_TYPES, load_node_type

REPORTS = Path(__file__).parent / "reports"
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
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


def small_instances(trials: int = 3000, seed: int = 5) -> dict[str, Any]:
    """Random small clusters (1-3 nodes of any catalog type, half their GPUs used, two leaves) and gangs
    (1-3 workers of 1, 2 or 4 GPUs, any intraNode): the engine against the exhaustive search."""
    rng = random.Random(seed)
    types = sorted(t for t in NODE_TYPES if "gb200" not in t)
    rated = short = refused = 0
    got_sum = best_sum = 0.0
    cases: list[dict[str, Any]] = []
    for _ in range(trials):
        nodes = []
        for i in range(rng.randint(1, 3)):
            topology = load_node_type(rng.choice(types))
            used = frozenset(g for g in range(topology.gpu_count) if rng.random() < 0.5)
            labels = {TIER0: rng.choice(["l0", "l1"]), TIER1: "s0"}
            nodes.append(NodeInfo(f"n{i}", topology, labels, used_gpus=used))
        snap = Snapshot(nodes)
        request = Request(rng.randint(1, 3), rng.choice([1, 2, 4]), intra_node=rng.choice(list(IntraNode)),
                          same_model=rng.random() < 0.5)  # fmt: skip
        if exhaustive_size(snap, request) > 30_000:
            continue
        best = exhaustive_optimum(snap, request)
        if best is None:
            continue
        result = place(snap, request)
        got = result.busbw_gbps if isinstance(result, Placement) else 0.0
        rated += 1
        got_sum += got
        best_sum += best
        if not isinstance(result, Placement) or got < best * (1 - 1e-9):
            short += 1
            refused += not isinstance(result, Placement)
            cases.append({
                "request": f"{request.workers} x {request.gpus_per_worker} GPUs, intraNode {request.intra_node}",
                "nodes": [f"{n.gpu_model} used {sorted(n.used_gpus)}" for n in nodes],
                "busbw_GBps": round(got, 3), "optimum_GBps": round(best, 3), "ratio": round(got / best, 4),
            })  # fmt: skip
    cases.sort(key=lambda c: c["ratio"])
    ratio = got_sum / best_sum if best_sum else None
    return {"rated": rated, "below_optimum": short, "refused": refused, "ratio_to_optimal": ratio, "worst": cases[:10]}


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
    small = small_instances()
    doc = {"scenarios": results, "overall": overall, "small_instances": small}
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
    ratio = small["ratio_to_optimal"]
    lines += [
        f"**random small clusters** (exhaustive search, `small_instances()`): {small['below_optimum']} of "
        f"{small['rated']} gangs below the optimum ({small['refused']} refused though placeable); pooled ratio "
        f"{'-' if ratio is None else f'{ratio:.4f}'}",
        "",
    ]
    if small["worst"]:
        lines += ["| gang | nodes | busbw GB/s | optimum GB/s | ratio |", "|---|---|---|---|---|"]
        lines += [
            f"| {c['request']} | {'; '.join(c['nodes'])} | {c['busbw_GBps']} | {c['optimum_GBps']} | {c['ratio']} |"
            for c in small["worst"]
        ]
        lines.append("")
    (REPORTS / "placement_quality.md").write_text("\n".join(lines) + "\n")
    plot_quality(overall, REPORTS / "placement_quality.png")
    print((REPORTS / "placement_quality.md").read_text())


if __name__ == "__main__":
    main()
