"""bench_multinode_share replays the trace on the sandbox's own layout, each job holding its GPUs, and its third
way keeps the H100 nodes for multi-node gangs only while one-node jobs fit elsewhere (pure, no API server)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from bench_multinode_share import (
    KEPT,
    _anywhere,
    _kept_for_multi_node,
    node_worth,
    replay,
    sandbox_snapshot,
    summarise,
)
from gang_trace import Job
from gputopo.sandbox.profiles import TIER0_LABEL, plan_nodes


def test_the_snapshot_is_the_sandbox_s_layout() -> None:
    snapshot = sandbox_snapshot(16)
    plans = plan_nodes("mixed", 16)
    assert [n.name for n in snapshot.nodes] == [p.name for p in plans]
    assert [n.labels[TIER0_LABEL] for n in snapshot.nodes] == [p.leaf for p in plans]


def test_each_job_holds_its_gpus_and_what_does_not_fit_waits() -> None:
    snapshot = sandbox_snapshot(4)  # one leaf of DGX A100, one of HGX H100: 32 GPUs
    jobs = [Job(f"j{i}", 1, 8) for i in range(5)]
    rows = replay(snapshot, jobs, _anywhere)
    placed = [r for r in rows.values() if r["placed"]]
    assert len(placed) == 4 and not rows["j4"]["placed"]
    assert sorted(n for r in placed for n in r["nodes"]) == sorted(n.name for n in snapshot.nodes)
    summary = summarise(jobs, rows)
    assert summary["jobs_placed"] == 4 and summary["multi_node_mean_gbps"] is None


def test_one_node_jobs_leave_the_kept_nodes_while_others_fit() -> None:
    snapshot = sandbox_snapshot(4)
    rows = replay(snapshot, [Job("one", 1, 8), Job("two", 1, 8), Job("three", 1, 8)], _kept_for_multi_node)
    kinds = [rows[j]["nodes"][0].rsplit("-", 1)[0] for j in ("one", "two", "three")]
    assert kinds == ["dgx-a100", "dgx-a100", KEPT]  # the third finds nothing else and takes one


def test_an_h100_node_is_worth_more_to_a_one_node_job_than_to_half_a_2x8_gang() -> None:
    worth = node_worth()
    h100, a100 = worth["hgx-h100"], worth["dgx-a100"]
    assert (
        h100["one_node_gbps"] - a100["one_node_gbps"]
        > h100["two_nodes_one_leaf_gbps"] - a100["two_nodes_one_leaf_gbps"]
    )
    assert a100["two_nodes_one_leaf_gbps"] > worth["hgx-a100"]["two_nodes_one_leaf_gbps"]
