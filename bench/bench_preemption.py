"""Priority and topology-aware preemption: gputopo against preemption by priority alone and against none.

Two clusters, each replayed through the simulator with one trace of three priority classes (low 60 %, mid
30 %, high 10 % of jobs; every job checkpoints every 30 minutes and has a 30 s grace period when preempted):
256 mixed 8-GPU nodes, and the NVL72 profile (8 GB200 NVL72 racks of 18 trays). Per policy: the high class's
wait p50/p99 and mean bus bandwidth, preemptions, victims that could move at once, and victim GPU-hours
lost. Then the decision time of one 64-GPU preemptor on 10,000 mixed nodes full of running gangs of three
priorities: cold (the pass's index of running gangs built for the decision) and warm (a later preemptor of the
same pass, which reuses it). One run, fixed seeds.

Goals: high-priority p99 wait <= the victims' grace period + 5 s; victim GPU-hours lost <= 0.7x the priority-only
policy's; high-priority bus bandwidth >= the priority-only policy's; decision p99 <= 200 ms at 10,000 nodes.
Writes bench/reports/preemption.{json,md,png}.  Run: python bench/bench_preemption.py [scenario names]
(``--report-only`` rewrites the Markdown and the plot from the JSON).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gputopo.placement import Request
from gputopo.placement.preemption import (
    PreemptionPlan,
    PreemptionRules,
    Preemptor,
    RunningIndex,
    plan_preemption,
)
from gputopo.placement.types import Snapshot
from gputopo.sim.generate import generate_cluster, generate_nvl72_cluster
from gputopo.sim.preemption.occupied import occupied_cluster
from gputopo.sim.preemption.replay import PREEMPTION_POLICIES, replay
from gputopo.sim.preemption.trace import generate_priority_trace

REPORTS = Path(__file__).parent / "reports"
GRACE_S = 30.0
POLICIES = ("gputopo", "priority-only", "none")
SCENARIOS: list[dict[str, Any]] = [
    {"name": "mixed-256", "jobs": 300, "mean_interarrival": 25.0, "seed": 21},
    {"name": "nvl72-8-racks", "jobs": 200, "mean_interarrival": 50.0, "seed": 22},
]


def _cluster(name: str, seed: int) -> Snapshot:
    if name.startswith("nvl72"):
        return generate_nvl72_cluster(8)
    return generate_cluster(random.Random(seed), 256)


def scenario(spec: dict[str, Any]) -> dict[str, Any]:
    nvl72 = spec["name"].startswith("nvl72")
    snapshot = _cluster(spec["name"], spec["seed"])
    shape: dict[str, Any] = {"gpus_per_node": 4, "slice_share": 0.3} if nvl72 else {}
    trace, _ = generate_priority_trace(
        random.Random(spec["seed"] + 1),
        spec["jobs"],
        grace_period_s=GRACE_S,
        mean_interarrival=spec["mean_interarrival"],
        **shape,
    )
    out: dict[str, Any] = {"nodes": len(snapshot), "gpus": snapshot.total_gpus, **spec, "policies": {}}
    for name in POLICIES:
        t0 = time.monotonic()
        summary = replay(snapshot, trace, PREEMPTION_POLICIES[name]).summary("high")
        out["policies"][name] = {**summary, "replay_s": round(time.monotonic() - t0, 1)}
        print(f"{spec['name']} {name}: {json.dumps(summary)}", flush=True)
    ours, peer = out["policies"]["gputopo"], out["policies"]["priority-only"]
    peer_lost = peer["victim_gpu_hours_lost"]
    lost_ratio = ours["victim_gpu_hours_lost"] / peer_lost if peer_lost else None
    out["goals"] = {
        "high_p99_wait_within_grace_plus_5s": (ours["high_wait_p99_s"] or 0) <= GRACE_S + 5,
        "victim_gpu_hours_lost_ratio_to_priority_only": lost_ratio,
        "victim_gpu_hours_lost_at_most_0.7x": lost_ratio is not None and lost_ratio <= 0.7,
        "high_busbw_at_least_priority_only": (ours["high_mean_busbw_GBps"] or 0)
        >= (peer["high_mean_busbw_GBps"] or 0) - 1e-9,
    }
    return out


def decision_time(nodes: int = 10_000, decisions: int = 20, seed: int = 31) -> dict[str, Any]:
    snapshot, running = occupied_cluster(seed, nodes)
    rules = PreemptionRules(now=10_000.0)
    cold: list[float] = []
    warm: list[float] = []
    victims: list[int] = []
    for d in range(decisions):
        wanted = Preemptor(Request(8, 8, name=f"preemptor-{d}", same_model=False), 5 + d % 3)
        t0 = time.perf_counter()
        index = RunningIndex(snapshot, running)
        plan = plan_preemption(index, wanted, rules=rules)
        cold.append(time.perf_counter() - t0)
        again = Preemptor(Request(8, 8, name=f"next-{d}", same_model=False), wanted.priority)
        t0 = time.perf_counter()
        plan_preemption(index, again, rules=rules)
        warm.append(time.perf_counter() - t0)
        assert isinstance(plan, PreemptionPlan), plan
        victims.append(len(plan.victims))

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "nodes": nodes,
        "running_gangs": len(running),
        "preemptor": "8 x 8 GPUs",
        "decisions": decisions,
        "cold_p50_ms": ms(cold, 0.5),
        "cold_p99_ms": ms(cold, 0.99),
        "warm_p50_ms": ms(warm, 0.5),
        "warm_p99_ms": ms(warm, 0.99),
        "mean_victims": statistics.fmean(victims),
        "goal_p99_at_most_200ms_warm": ms(warm, 0.99) <= 200,
        "goal_p99_at_most_200ms_cold": ms(cold, 0.99) <= 200,
    }


def _markdown(doc: dict[str, Any]) -> str:
    lines = ["# Priority and topology-aware preemption", ""]
    lines.append(
        f"Replayed through `gputopo.sim.preemption.replay`; victims' grace period {GRACE_S:.0f} s, "
        "checkpoints every 30 min; the high class is 10 % of jobs. Host load average (1, 5, 15 min) when the run "
        f"started, on 2 shared cores: {doc['load_average']}."
    )
    for sc in doc["scenarios"]:
        lines += ["", f"## {sc['name']}: {sc['nodes']} nodes, {sc['gpus']} GPUs, {sc['jobs']} jobs", ""]
        lines.append(
            "| policy | high wait p50 s | high wait p99 s | high mean bus bw GB/s | preemptions | movable | "
            "victim GPU-h lost | never placed |"
        )
        lines.append("|---|---|---|---|---|---|---|---|")
        for name, s in sc["policies"].items():
            lines.append(
                f"| {name} | {s['high_wait_p50_s'] or 0:.1f} | {s['high_wait_p99_s'] or 0:.1f} | "
                f"{(s['high_mean_busbw_GBps'] or 0):.1f} | {s['preemptions']} | {s['victims_movable']} | "
                f"{s['victim_gpu_hours_lost']:.1f} | {s['jobs_never_placed']} |"
            )
        g = sc["goals"]
        word = {True: "met", False: "missed"}
        ratio = g["victim_gpu_hours_lost_ratio_to_priority_only"]
        lines += [
            "",
            f"- high p99 wait <= {GRACE_S + 5:.0f} s: **{word[g['high_p99_wait_within_grace_plus_5s']]}**",
            f"- victim GPU-hours lost vs priority-only: {ratio if ratio is None else round(ratio, 3)}x "
            f"(goal <= 0.7x): **{word[g['victim_gpu_hours_lost_at_most_0.7x']]}**",
            f"- high bus bandwidth >= priority-only: **{word[g['high_busbw_at_least_priority_only']]}**",
        ]
    d = doc["decision"]
    lines += [
        "",
        f"## Decision time: {d['preemptor']} preemptor, {d['nodes']} nodes, {d['running_gangs']} running gangs",
        "",
        "| index | p50 ms | p99 ms |",
        "|---|---|---|",
        f"| cold (built for the decision) | {d['cold_p50_ms']} | {d['cold_p99_ms']} |",
        f"| warm (a pass's later preemptor) | {d['warm_p50_ms']} | {d['warm_p99_ms']} |",
        "",
        f"Goal p99 <= 200 ms: warm **{'met' if d['goal_p99_at_most_200ms_warm'] else 'missed'}**, "
        f"cold **{'met' if d['goal_p99_at_most_200ms_cold'] else 'missed'}**; {d['mean_victims']:.1f} victims "
        "per decision on average.",
    ]
    return "\n".join(lines) + "\n"


def _plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("high_wait_p99_s", "high p99 wait (s, log)", "tab:red"),
        ("victim_gpu_hours_lost", "victim GPU-hours lost", "tab:orange"),
        ("high_mean_busbw_GBps", "high mean bus bw (GB/s)", "tab:blue"),
    )
    fig, axes = plt.subplots(len(doc["scenarios"]), len(panels), figsize=(12, 3.6 * len(doc["scenarios"])))
    for row, sc in zip(axes, doc["scenarios"], strict=True):
        names = list(sc["policies"])
        for ax, (key, label, color) in zip(row, panels, strict=True):
            ax.bar(names, [sc["policies"][n][key] or 0 for n in names], color=color)
            ax.set_title(f"{sc['name']}: {label}", fontsize=9)
            if key == "high_wait_p99_s":
                ax.set_yscale("symlog")
                ax.axhline(GRACE_S + 5, color="black", linestyle="--", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    if sys.argv[1:] == ["--report-only"]:  # rewrite the Markdown and the plot from the JSON of the last run
        doc = json.loads((REPORTS / "preemption.json").read_text())
        (REPORTS / "preemption.md").write_text(_markdown(doc))
        _plot(doc, REPORTS / "preemption.png")
        return
    doc: dict[str, Any] = {"load_average": [round(x, 1) for x in os.getloadavg()]}
    only = set(sys.argv[1:])
    doc["scenarios"] = [scenario(spec) for spec in SCENARIOS if not only or spec["name"] in only]
    doc["decision"] = decision_time()
    print(json.dumps(doc["decision"]), flush=True)
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "preemption.json").write_text(json.dumps(doc, indent=2) + "\n")
    (REPORTS / "preemption.md").write_text(_markdown(doc))
    _plot(doc, REPORTS / "preemption.png")
    print((REPORTS / "preemption.md").read_text())


if __name__ == "__main__":
    main()
