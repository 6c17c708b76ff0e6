"""The peers on NVL72 racks, as their schedulers are configured for GB200, and the NVL72 cluster generator."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import yaml
from placement_builders import rack_snapshot, racks
from typer.testing import CliRunner

from gputopo.cli.main import app
from gputopo.placement import Placement, Request, Unplaceable
from gputopo.sim.cluster_file import snapshot_from_data, snapshot_to_data, trace_from_data, trace_to_data
from gputopo.sim.generate import generate_nvl72_cluster, generate_trace, job_shape
from gputopo.sim.peers import place_kueue_tas, place_slurm_block, place_topology_blind
from gputopo.sim.policies import POLICIES
from gputopo.sim.simulation import simulate


def per_rack(result: Placement | Unplaceable) -> list[int]:
    assert isinstance(result, Placement), result
    return sorted(Counter(w.node.split("-")[0] for w in result.workers).values(), reverse=True)


@pytest.mark.parametrize(
    ("policy", "workers", "slice_size", "expected"),
    [
        (place_kueue_tas, 12, None, [12]),
        (place_kueue_tas, 24, None, [18, 6]),  # greedy: the largest clique first, no cap, no balance
        (place_kueue_tas, 24, 8, [16, 8]),  # slices of 8 pods, each inside one clique
        (place_slurm_block, 12, None, [12]),
        (place_slurm_block, 24, None, [18, 6]),
        (place_slurm_block, 24, 8, [16, 8]),  # --segment=8
    ],
    ids=["kueue-fits", "kueue-24", "kueue-slices-of-8", "slurm-fits", "slurm-24", "slurm-segment-8"],
)
def test_peers_on_racks(policy: object, workers: int, slice_size: int | None, expected: list[int]) -> None:
    result = policy(rack_snapshot(*racks(4)), Request(workers, 4, slice_size=slice_size))  # type: ignore[operator]
    assert per_rack(result) == expected


def test_kueue_packs_small_jobs_into_the_fullest_clique() -> None:
    snap = rack_snapshot(*racks(3, used={"r2": 10}))
    result = place_kueue_tas(snap, Request(4, 4))
    assert isinstance(result, Placement) and {n.split("-")[0] for n in result.nodes} == {"r2"}


def test_slurm_aggregates_neighbouring_blocks_first() -> None:
    # 30 trays: no base block holds them; blocks r0+r1 (an aggregated block of 2) do.
    result = place_slurm_block(rack_snapshot(*racks(4, used={"r0": 6})), Request(30, 4))
    assert isinstance(result, Placement) and {n.split("-")[0] for n in result.nodes} == {"r0", "r1"}


def test_a_slice_that_fits_nowhere_is_refused_by_name() -> None:
    snap = rack_snapshot(*racks(2, trays=6))
    for policy, who in ((place_kueue_tas, "Kueue TAS"), (place_slurm_block, "Slurm topology/block")):
        result = policy(snap, Request(8, 4, slice_size=8))
        assert isinstance(result, Unplaceable) and result.reason.startswith(who)


def test_topology_blind_ignores_the_racks() -> None:
    nodes = racks(2, trays=4)
    nodes[0], nodes[1] = nodes[0].used(0, 1), nodes[1].used(0, 1)  # r0: two half-used trays, two empty
    result = place_topology_blind(rack_snapshot(*nodes), Request(4, 4))
    assert per_rack(result) == [2, 2], "least allocated: r0's empty trays first, then r1's, though r1 holds all 4"


def test_nvl72_cluster_and_trace_round_trip_through_files() -> None:
    snap = generate_nvl72_cluster(3)
    assert len(snap) == 54 and len(set(snap.nvlink_domains)) == 3
    again = snapshot_from_data(snapshot_to_data(snap))
    assert again.nvlink_domains == snap.nvlink_domains
    trace = generate_trace(random.Random(3), 200, gpus_per_node=4, slice_share=1.0)
    assert all(j.gpus_per_worker <= 4 for j in trace)
    sliced = [j for j in trace if j.slice_size]
    assert sliced and all(j.workers % j.slice_size == 0 and j.slice_size == 8 for j in sliced if j.slice_size)
    assert trace_from_data(trace_to_data(trace)) == trace
    assert job_shape(24, 4) == (6, 4) and job_shape(3, 4) == (1, 3)


def test_every_policy_simulates_on_racks() -> None:
    snap = generate_nvl72_cluster(2)
    trace = generate_trace(random.Random(5), 30, gpus_per_node=4, slice_share=0.5, max_gpus=64)
    for name, policy in POLICIES.items():
        report = simulate(snap, trace, name, policy, exact=False)
        summary = report.summary()
        assert summary["jobs_placed"] == 30, name
        assert 0 < float(summary["gpu_utilisation"] or 0) <= 1


def test_simulate_cli_generates_and_replays_an_nvl72_cluster(tmp_path: Path) -> None:
    cluster, trace = tmp_path / "c.yaml", tmp_path / "t.yaml"
    runner = CliRunner()
    args = ["simulate", "--cluster", str(cluster), "--trace", str(trace), "--cluster-profile", "nvl72"]
    made = runner.invoke(app, [*args, "--generate-cluster", "36", "--generate-trace", "20"])
    assert made.exit_code == 0, made.output
    snap = snapshot_from_data(yaml.safe_load(cluster.read_text()))
    assert len(snap) == 36 and len(set(snap.nvlink_domains)) == 2
    ran = runner.invoke(app, [*args, "--policy", "gputopo,kueue-tas,slurm-block", "--json"])  # no optimum here
    assert ran.exit_code == 0, ran.output
    policies = json.loads(ran.stdout)["policies"]
    assert set(policies) == {"gputopo", "kueue-tas", "slurm-block"}
    assert all(p["ratio_to_optimal"] is None for p in policies.values())
    bad = runner.invoke(app, [*args[:-1], "dgx", "--generate-cluster", "36"])
    assert bad.exit_code != 0 and "mixed or nvl72" in bad.output
