"""Placement latency: one gang on 1,000 and 10,000-node snapshots, and how time grows.

Cold: a new Snapshot per decision (empty group cache, as after a restart). Warm: the snapshot of the
previous decision (the operator's steady state: its cache survives ``reserve``). The last table compares
who picks the GPUs within a node: gputopo's own groups (``planned``, DRA mode) against the device plugin's
best-effort policy rank after rank (``devicePlugin``, the operator's default mode).
Writes bench/reports/placement_speed.{json,md,png}.  Run: python bench/bench_placement_speed.py
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from pathlib import Path

from gputopo.placement import GpuChoice, Placement, Request, Snapshot, place
from gputopo.sim.generate import generate_cluster

REPORTS = Path(__file__).parent / "reports"


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


def main() -> None:
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
    doc = {
        "latency": rows,
        "gpu_choice": choices,
        "growth_with_nodes": growth_nodes,
        "exponent_nodes": fit([g["nodes"] for g in growth_nodes], [g["median_ms"] for g in growth_nodes]),
        "growth_with_job_size": growth_size,
        "exponent_job_size": fit([g["gpus"] for g in growth_size], [g["median_ms"] for g in growth_size]),
    }
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "placement_speed.json").write_text(json.dumps(doc, indent=2))
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
    (REPORTS / "placement_speed.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.loglog([g["nodes"] for g in growth_nodes], [g["median_ms"] for g in growth_nodes], "o-")
    a.set_xlabel("nodes in snapshot")
    a.set_ylabel("median ms (64-GPU job, cold)")
    b.loglog([g["gpus"] for g in growth_size], [g["median_ms"] for g in growth_size], "o-")
    b.set_xlabel("job GPUs (10,000 nodes)")
    fig.tight_layout()
    fig.savefig(REPORTS / "placement_speed.png", dpi=120)
    print((REPORTS / "placement_speed.md").read_text())


if __name__ == "__main__":
    main()
