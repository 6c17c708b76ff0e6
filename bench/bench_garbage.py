"""A control pass's time with 1,000 garbage pods present against none.

One tenant's namespace holds 1,000 pods and 39 owner objects of garbage (``gputopo.sandbox.garbage``: huge
numbers, long strings, wrong types, digits of other scripts in every label, annotation, env and owner field the
gang reader reads; each pod gputopo's member, none asking for a GPU); another namespace holds valid gangs. A pass
is what the operator's loop does for the gangs on each wake: read the gangs from the watched pods and owners
(``read_gangs``, with the memos the operator keeps between passes) and run the pure pass (``run_pass``: every gang
stepped, the valid ones planned). Every pass is given the same objects, so each plans the valid gangs afresh: the
difference between the two cases is what the garbage costs.

Cold: the first pass of a round (memos empty, as after a restart or a relist; the placement cache new), the median
of the rounds. Steady: the passes after it with nothing changed (the memos hold each pod's reading). The two cases
take turns, round by round, so the shared machine's load falls on both. Times in ms on the machine below.
Writes bench/reports/garbage.{json,md}.  Run: python bench/bench_garbage.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from gputopo.control.facts import JobKey, NodeFacts, PodGpusFacts, TopologyFacts
from gputopo.control.gangpass import GangInput
from gputopo.control.lifecycle import Config
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.claimmemo import ClaimMemo
from gputopo.gangs.claims import Claim, Owners
from gputopo.gangs.model import Gang
from gputopo.gangs.planning import plan_gang
from gputopo.gangs.read import MemberMemo, Refusal, read_gangs
from gputopo.placement import place
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import Placement, Snapshot, TierConfig, TierLevel, Unplaceable
from gputopo.sandbox.garbage import GATE, garbage_owners, garbage_pods
from gputopo.topology.catalog import load_node_type
from reporting import fmt, report_head, stats, write_report

TEAM, TENANT = "team", "tenant"
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
TIERS = TierConfig((TierLevel(TIER0, 1.0), TierLevel(TIER1, 2.0)))
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def cluster(nodes: int) -> ClusterView:
    """``nodes`` HGX H100 nodes, 16 under each tier-0 switch."""
    topology = load_node_type("hgx-h100")
    names = [f"node-{i:04d}" for i in range(nodes)]
    return ClusterView(
        topologies={n: TopologyFacts(n, topology) for n in names},
        nodes={
            n: NodeFacts(n, {TIER0: f"leaf-{i // 16}", TIER1: "spine-0"}, ready=True, ready_since=NOW)
            for i, n in enumerate(names)
        },
        pods=(),
        pod_gpus={n: PodGpusFacts(n, seen_at=NOW) for n in names},
    )


def valid_gangs(count: int) -> list[dict[str, Any]]:
    """``count`` gangs of gputopo's pod contract, two gated pods of 4 GPUs each."""
    pods = []
    for g in range(count):
        for rank in range(2):
            pods.append(
                {
                    "metadata": {
                        "name": f"valid-{g}-{rank}",
                        "namespace": TEAM,
                        "uid": f"valid-{g}-{rank}",
                        "labels": {
                            "gputopo.io/gang": f"valid-{g}",
                            "gputopo.io/gang-size": "2",
                            "gputopo.io/rank": str(rank),
                        },
                        "creationTimestamp": "2026-12-07T11:59:00Z",
                    },
                    "spec": {
                        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}],
                        "schedulingGates": [{"name": GATE}],
                    },
                    "status": {"phase": "Pending"},
                }
            )
    return pods


def garbage(count: int) -> tuple[list[dict[str, Any]], Owners]:
    owners = garbage_owners(TENANT)
    for i, owner in enumerate(owners):
        owner["metadata"]["uid"] = f"owner-{i}"
    pods = garbage_pods(TENANT, count, owners)
    for i, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"garbage-{i}"
    by_kind: dict[str, dict[tuple[str, str], Any]] = {"JobSet": {}, "LeaderWorkerSet": {}, "PyTorchJob": {}}
    for owner in owners:
        by_kind[owner["kind"]][(TENANT, owner["metadata"]["name"])] = owner
    return pods, Owners(
        jobsets=by_kind["JobSet"], leaderworkersets=by_kind["LeaderWorkerSet"], pytorchjobs=by_kind["PyTorchJob"]
    )


def planner(snapshot: Snapshot, gang: Gang) -> Placement | Unplaceable:
    plan = plan_gang(snapshot, gang, TIERS, place)
    return plan if isinstance(plan, Unplaceable) else plan.placement


def passes(view: ClusterView, pods: list[dict[str, Any]], owners: Owners, runs: int) -> dict[str, Any]:
    """``runs`` passes over the same objects: each one's time, and what the last one read and planned."""
    members, claims = MemberMemo(), ClaimMemo[Claim | Refusal | None]()
    cache = PlacementCache()
    rules = PassRules(Config(TIERS), place, Limits(300.0, None, None))
    times, read_times = [], []
    for _ in range(runs):
        start = time.perf_counter()
        found = read_gangs(pods, owners, members, claims)
        read = time.perf_counter()
        bodies = {p["metadata"]["uid"]: p for p in pods}
        given = GangInput({JobKey(g.id.key): g for g in found.gangs}, {}, bodies, planner)
        result = run_pass(PassInput({}, {}, view, NOW, cache=cache, gangs=given), rules)
        end = time.perf_counter()
        times.append((end - start) * 1000)
        read_times.append((read - start) * 1000)
    refused = [g for g in found.gangs if g.problems]
    return {
        "cold_ms": times[0],
        "cold_read_ms": read_times[0],
        "steady_all": times[1:],
        "steady_read_all": read_times[1:],
        "gangs_read": len(found.gangs),
        "gangs_refused": len(refused),
        "pods_refused": len(found.refused),
        "pods_unclaimed": len(found.unclaimed),
        "valid_gangs_planned": sum(1 for p in result.gang_plans if p.job[0] == TEAM),
        "fenced": sum(1 for g in found.gangs for p in g.problems if "gputopo could not" in p),
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# A control pass with 1,000 garbage pods present against none",
        "",
        f"`{report['command']}` on {report['machine']}, load average {report['load']}. "
        f"{report['nodes']} HGX H100 nodes; {report['valid_gangs']} valid gangs of two 4-GPU pods in one namespace; "
        f"{report['repeats']} rounds of {report['runs']} passes per case over the same objects, the cases in turn "
        "(each round's first pass cold: its median is shown; the rest steady).",
        "",
        "| garbage pods | cold pass (ms) | of it reading | steady pass p50 / p90 (ms) | of it reading p50 | gangs read "
        "| gangs refused | pods refused | valid gangs planned | fenced |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        lines.append(
            f"| {row['garbage_pods']:,} | {fmt(row['cold_ms'])} | {fmt(row['cold_read_ms'])} "
            f"| {fmt(row['steady_ms']['p50'])} / {fmt(row['steady_ms']['p90'])} | {fmt(row['steady_read_ms']['p50'])} "
            f"| {row['gangs_read']} | {row['gangs_refused']} | {row['pods_refused']} | {row['valid_gangs_planned']} "
            f"| {row['fenced']} |"
        )
    none, full = report["cases"][0], report["cases"][-1]
    lines += [
        "",
        f"The garbage adds {fmt(full['cold_ms'] - none['cold_ms'])} ms to a cold pass and "
        f"{fmt(full['steady_ms']['p50'] - none['steady_ms']['p50'])} ms to a steady one (p50). Valid gangs planned: "
        f"{none['valid_gangs_planned']} of {report['valid_gangs']} without the garbage, "
        f"{full['valid_gangs_planned']} with it; garbage gangs refused: {full['gangs_refused']} of "
        f"{full['gangs_read'] - report['valid_gangs']}; readings that needed the fence (`fenced`: problems saying "
        f"gputopo could not read a pod or gang): {full['fenced']}. Before the bounded reader, such a pass raised "
        "out of the gang reader (an all-digit value past Python's 4,300-digit limit) and planned nothing.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--valid-gangs", type=int, default=16)
    parser.add_argument("--garbage", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv[1:])
    view = cluster(args.nodes)
    valid = valid_gangs(args.valid_gangs)
    junk, owners = garbage(args.garbage)
    passes(view, valid, Owners(), 2)  # the process's shared tables (a node model's groups) built once, for both
    runs: dict[int, list[dict[str, Any]]] = {0: [], args.garbage: []}
    for _ in range(args.repeats):  # the two cases in turn, each start cold (memos and placement cache new)
        for count, pods in ((0, valid), (args.garbage, valid + junk)):
            runs[count].append(passes(view, pods, owners if count else Owners(), args.runs))
    cases = []
    for count, rows in runs.items():
        cold = sorted(r["cold_ms"] for r in rows)[len(rows) // 2]
        cold_read = sorted(r["cold_read_ms"] for r in rows)[len(rows) // 2]
        steady = [t for r in rows for t in r["steady_all"]]
        steady_read = [t for r in rows for t in r["steady_read_all"]]
        last = {k: v for k, v in rows[-1].items() if not k.endswith("_all")}
        cases.append(
            {
                "garbage_pods": count,
                **last,
                "cold_ms": cold,
                "cold_read_ms": cold_read,
                "steady_ms": stats(steady),
                "steady_read_ms": stats(steady_read),
                "cold_runs_ms": [r["cold_ms"] for r in rows],
            }
        )
    report = {
        **report_head(argv),
        "load": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "nodes": args.nodes,
        "valid_gangs": args.valid_gangs,
        "garbage_owners": len(garbage_owners(TENANT)),
        "runs": args.runs,
        "repeats": args.repeats,
        "cases": cases,
    }
    write_report("garbage", report, markdown(report))


if __name__ == "__main__":
    main(sys.argv)
