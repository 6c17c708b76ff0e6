"""Properties on random small clusters: valid, never above the optimum, deterministic; exact = brute force."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo.api.trainingjob import IntraNode
from gputopo.placement import NodeInfo, Placement, Request, Snapshot, place
from gputopo.placement.gang import NodeShare, score_gang, spanning_tier
from gputopo.sim.exact import optimum
from gputopo.sim.policies import POLICIES
from gputopo.topology.catalog import NODE_TYPES, load_node_type
from gputopo.topology.gang import estimate_gang

TYPES = sorted(NODE_TYPES)


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 4) -> Snapshot:
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(n):
        topology = load_node_type(draw(st.sampled_from(TYPES)))
        used = draw(st.frozensets(st.integers(0, 7), max_size=6))
        leaf = draw(st.sampled_from(["l0", "l1"]))
        labels = {"fabric.topograph.run/tier-0": leaf, "fabric.topograph.run/tier-1": "s0"}
        nodes.append(NodeInfo(f"n{i}", topology, labels, used_gpus=used))
    return Snapshot(nodes)


requests = st.builds(
    Request,
    workers=st.integers(1, 3),
    gpus_per_worker=st.sampled_from([1, 2, 3, 4, 8]),
    intra_node=st.sampled_from(list(IntraNode)),
    same_model=st.booleans(),
)


def assert_valid(snap: Snapshot, request: Request, result: Placement) -> None:
    assert len(result.workers) == request.workers
    seen: set[tuple[str, int]] = set()
    for worker in result.workers:
        node = snap.node(worker.node)
        assert len(worker.gpus) == request.gpus_per_worker
        mask = sum(1 << g for g in worker.gpus)
        assert snap.cache.scores(node.topology).allowed(mask, request.intra_node)
        for gpu in worker.gpus:
            assert gpu in node.free_gpus and node.topology.gpus[gpu].healthy
            assert (worker.node, gpu) not in seen
            seen.add((worker.node, gpu))
    if request.same_model:
        assert len({snap.node(n).gpu_model for n in result.nodes}) == 1


@settings(max_examples=60, deadline=None)
@given(clusters(), requests)
def test_engine_is_valid_never_above_optimum_and_deterministic(snap: Snapshot, request: Request) -> None:
    result = place(snap, request)
    best = optimum(snap, request)
    if isinstance(result, Placement):
        assert_valid(snap, request, result)
        assert best is not None and result.busbw_gbps <= best + 1e-9
        assert place(Snapshot(snap.nodes, snap.tiers), request) == result
    else:
        assert best is None


@settings(max_examples=40, deadline=None)
@given(clusters(), requests)
def test_peers_produce_valid_gangs(snap: Snapshot, request: Request) -> None:
    # The peers model schedulers that know neither NVLink requirements nor GPU-model sameness.
    request = Request(request.workers, request.gpus_per_worker, same_model=False)
    for policy in POLICIES.values():
        result = policy(snap, request)
        if isinstance(result, Placement):
            assert_valid(snap, request, result)


def brute_force(snap: Snapshot, request: Request) -> float | None:
    """Every assignment of workers to (node, group): only for tiny clusters."""
    slots = []
    for i, node in enumerate(snap.nodes):
        scores = snap.cache.scores(node.topology)
        for gpus in combinations(sorted(node.free_gpus), request.gpus_per_worker):
            mask = sum(1 << g for g in gpus)
            if all(node.topology.gpus[g].healthy for g in gpus) and scores.allowed(mask, request.intra_node):
                slots.append((i, mask))
    best = None
    for choice in combinations(slots, request.workers):
        by_node: dict[int, list[int]] = {}
        for i, mask in choice:
            by_node.setdefault(i, []).append(mask)
        if any(a & b for masks in by_node.values() for a, b in combinations(masks, 2)):
            continue
        if request.same_model and len({snap.nodes[i].gpu_model for i in by_node}) > 1:
            continue
        value = score_gang(snap, [NodeShare(i, tuple(m)) for i, m in by_node.items()]).busbw_gbps
        best = value if best is None else max(best, value)
    return best


@settings(max_examples=40, deadline=None)
@given(clusters(max_nodes=3), st.integers(1, 3), st.sampled_from([2, 4]))
def test_exact_matches_brute_force(snap: Snapshot, workers: int, k: int) -> None:
    request = Request(workers, k)
    expected = brute_force(snap, request)
    got = optimum(snap, request)
    if expected is None:
        assert got is None
    else:
        assert got is not None and abs(got - expected) < 1e-6


@settings(max_examples=60, deadline=None)
@given(clusters(), requests)
def test_placed_figure_is_the_topology_estimate(snap: Snapshot, request: Request) -> None:
    # One bus-bandwidth model: what the engine reports is gputopo.topology.estimate_gang of its choice.
    result = place(snap, request)
    if not isinstance(result, Placement):
        return
    by_node: dict[str, list[int]] = {}
    for worker in result.workers:
        by_node.setdefault(worker.node, []).extend(worker.gpus)
    nodes = list(by_node)
    tier, _ = spanning_tier(snap, [snap.index_of(n) for n in nodes])
    members = [(snap.node(n).topology, sorted(gpus)) for n, gpus in by_node.items()]
    domains = [snap.nvlink_domains[snap.index_of(n)] for n in by_node]
    expected = estimate_gang(members, oversubscription=snap.tiers.oversubscription(tier), domains=domains)
    assert result.busbw_gbps == pytest.approx(expected.busbw_gbps, rel=1e-12)
