"""Placement latency: one gang on 1,000 and 10,000-node snapshots, and how time grows; and gangs on 100,000
GB200 GPUs in NVL72 racks.

Cold: a new Snapshot per decision (empty group cache, as after a restart; the node topologies are the same
objects, as in the operator). Warm: the snapshot of the previous decision (the operator's steady state: its
cache survives ``reserve``). The chooser table compares who picks the GPUs within a node: gputopo's own
groups (``planned``, DRA mode) against the device plugin's best-effort policy rank after rank
(``devicePlugin``, the operator's default mode). The NVL72 table places 1,024 and 64-GPU gangs of 4-GPU
workers on ``generate_nvl72_cluster(1389)`` (25,002 trays, 100,008 GPUs), against the goals set for it.
Writes bench/reports/placement_speed.{json,md,png}.  Run: python bench/bench_placement_speed.py
(``--nvl72-only``: measure only the NVL72 rows and keep the other rows of the committed JSON report).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from gputopo.placement import GpuChoice, Placement, Request, Snapshot, place
from gputopo.sim.generate import generate_cluster, generate_nvl72_cluster

REPORTS = Path(__file__).parent / "reports"
NVL72_RACKS = 1389  # 25,002 trays of 4 GB200 GPUs: 100,008 GPUs
# (job GPUs, cache, decisions, goal for the p99 in ms or None)
NVL72_ROWS: list[tuple[int, str, int, float | None]] = [
    (1024, "warm", 200, 200.0),
    (1024, "cold", 100, 500.0),
    (64, "warm", 200, 50.0),
    (64, "cold", 100, None),
]


def cluster(nodes: int) -> Snapshot:
    return generate_cluster(random.Random(7), nodes, used_share=0.15)


def timings(snap: Snapshot, request: Request, runs: int, *, cold: bool) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        target = Snapshot(snap.nodes, snap.tiers) if cold else snap
        result = place(target, request)
        out.append((time.perf_counter() - start) * 1000)
        assert isinstance(result, Placement), result
    return out


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else values[0]


def fit(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def measure() -> dict[str, Any]:
    """The rows of the 1,000 and 10,000-node snapshots: latency, growth, and who picks the GPUs."""
    rows = []
    for nodes, gpus, runs in [(1000, 64, 200), (10000, 64, 60), (10000, 512, 60)]:
        snap = cluster(nodes)
        request = Request(gpus // 8, 8, same_model=False)
        place(snap, request)  # warm the node-type tables once
        for cold in (False, True):
            t = timings(snap, request, runs, cold=cold)
            rows.append({"nodes": nodes, "gpus": gpus, "cache": "cold" if cold else "warm", "runs": runs,
                         "median_ms": statistics.median(t), "p99_ms": p99(t)})  # fmt: skip
    growth_nodes = []
    for nodes in (250, 500, 1000, 2000, 5000, 10000):
        snap = cluster(nodes)
        t = timings(snap, Request(8, 8, same_model=False), 15, cold=True)
        growth_nodes.append({"nodes": nodes, "median_ms": statistics.median(t)})
    big = cluster(10000)
    growth_size = []
    for gpus in (8, 32, 64, 128, 256, 512, 1024):
        t = timings(big, Request(max(1, gpus // 8), 8, same_model=False), 15, cold=True)
        growth_size.append({"gpus": gpus, "median_ms": statistics.median(t)})
    choices = []
    for nodes, workers, per_worker in [(1000, 8, 8), (1000, 16, 2), (1000, 8, 1), (10000, 16, 2)]:
        snap = cluster(nodes)
        for choice in GpuChoice:
            request = Request(workers, per_worker, same_model=False, gpu_choice=choice)
            cold = timings(snap, request, 15, cold=True)
            place(snap, request)
            warm = timings(snap, request, 30, cold=False)
            choices.append(
                {
                    "nodes": nodes,
                    "workers": workers,
                    "gpus_per_worker": per_worker,
                    "choice": str(choice),
                    "cold_median_ms": statistics.median(cold),
                    "warm_median_ms": statistics.median(warm),
                }
            )
    return {
        "latency": rows,
        "gpu_choice": choices,
        "growth_with_nodes": growth_nodes,
        "exponent_nodes": fit([g["nodes"] for g in growth_nodes], [g["median_ms"] for g in growth_nodes]),
        "growth_with_job_size": growth_size,
        "exponent_job_size": fit([g["gpus"] for g in growth_size], [g["median_ms"] for g in growth_size]),
    }


def measure_nvl72() -> dict[str, Any]:
    """1,024 and 64-GPU gangs (4-GPU workers, one per tray) on 100,008 GB200 GPUs, warm and cold."""
    snap = generate_nvl72_cluster(NVL72_RACKS)
    load_before = os.getloadavg()[0]
    rows = []
    for gpus, cache, runs, goal in NVL72_ROWS:
        request = Request(gpus // 4, 4)
        place(snap, request)  # the snapshot's own tables and the node-type tables, once
        t = timings(snap, request, runs, cold=cache == "cold")
        row = {"gpus": gpus, "workers": gpus // 4, "cache": cache, "runs": runs,
               "median_ms": statistics.median(t), "p99_ms": p99(t), "max_ms": max(t), "goal_p99_ms": goal}  # fmt: skip
        rows.append(row)
    return {
        "racks": NVL72_RACKS,
        "trays": len(snap),
        "gpus": snap.total_gpus,
        "rows": rows,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def render(doc: dict[str, Any]) -> str:
    rows, growth_nodes, growth_size, choices = (
        doc["latency"], doc["growth_with_nodes"], doc["growth_with_job_size"], doc["gpu_choice"]
    )  # fmt: skip
    lines = [
        "# Placement latency",
        "",
        "| nodes | job GPUs | cache | runs | median ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['nodes']} | {r['gpus']} | {r['cache']} | {r['runs']} | {r['median_ms']:.1f} | {r['p99_ms']:.1f} |"
        for r in rows
    ]
    lines += [
        "",
        f"Time grows as nodes^{doc['exponent_nodes']:.2f} (64-GPU job, cold) and as "
        f"job GPUs^{doc['exponent_job_size']:.2f} (10,000 nodes, cold).",
        "",
    ]
    lines += ["| nodes | median ms |", "|---|---|"] + [f"| {g['nodes']} | {g['median_ms']:.1f} |" for g in growth_nodes]
    lines += ["", "| job GPUs | median ms |", "|---|---|"] + [
        f"| {g['gpus']} | {g['median_ms']:.1f} |" for g in growth_size
    ]
    lines += [
        "",
        "Who picks a worker's GPUs within its node (15 cold, 30 warm decisions each):",
        "",
        "| nodes | workers x GPUs | chooser | cold median ms | warm median ms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {c['nodes']} | {c['workers']} x {c['gpus_per_worker']} | {c['choice']} | "
        f"{c['cold_median_ms']:.1f} | {c['warm_median_ms']:.1f} |"
        for c in choices
    ]
    nvl = doc.get("nvl72")
    if nvl:
        lines += [
            "",
            f"## {nvl['gpus']:,} GB200 GPUs: {nvl['racks']:,} NVL72 racks, {nvl['trays']:,} trays",
            "",
            "`generate_nvl72_cluster(1389)`, every GPU free; gangs of 4-GPU workers, one per tray (a 1,024-GPU",
            "gang spans 16 racks at 16 trays each, the cap). Cold: a new Snapshot per decision, as above (an empty",
            "placement cache; what each topology object keeps of itself stays, as for the rows above); warm: the",
            "same snapshot again, its own candidates and NVLink-domain summary kept.",
            "",
            "| job GPUs | cache | runs | median ms | p99 ms | max ms | goal: p99 ms | met |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in nvl["rows"]:
            goal = r["goal_p99_ms"]
            met = "-" if goal is None else ("yes" if r["p99_ms"] <= goal else "no")
            lines.append(
                f"| {r['gpus']} | {r['cache']} | {r['runs']} | {r['median_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{r['max_ms']:.1f} | {'-' if goal is None else f'<= {goal:.0f}'} | {met} |"
            )
        before, after = nvl["load_average_1m"]
        lines += [
            "",
            f"Load average (1 min) on the machine's {nvl['cpus']} CPUs: {before} before these rows, {after} after; "
            "the machine is shared, so wall times include waits for a CPU.",
        ]
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    growth_nodes, growth_size = doc["growth_with_nodes"], doc["growth_with_job_size"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.loglog([g["nodes"] for g in growth_nodes], [g["median_ms"] for g in growth_nodes], "o-")
    a.set_xlabel("nodes in snapshot")
    a.set_ylabel("median ms (64-GPU job, cold)")
    b.loglog([g["gpus"] for g in growth_size], [g["median_ms"] for g in growth_size], "o-")
    b.set_xlabel("job GPUs (10,000 nodes)")
    fig.tight_layout()
    fig.savefig(REPORTS / "placement_speed.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvl72-only", action="store_true", help="measure the NVL72 rows only, keep the others")
    args = parser.parse_args()
    doc = json.loads((REPORTS / "placement_speed.json").read_text()) if args.nvl72_only else measure()
    doc["nvl72"] = measure_nvl72()
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "placement_speed.json").write_text(json.dumps(doc, indent=2))
    (REPORTS / "placement_speed.md").write_text(render(doc))
    plot(doc)
    print((REPORTS / "placement_speed.md").read_text())


if __name__ == "__main__":
    main()
