"""Well-connected groups: ranking, exclusions, intraNode, limits, and a brute-force cross-check."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_estimate import topologies
from topo_builders import node

from gputopo.api.nodetopology import GpuHealthState, LinkKind, LinkState
from gputopo.api.trainingjob import IntraNode
from gputopo.topology import (
    PCIE_LEVELS,
    Topology,
    TopologyError,
    estimate_node,
    hop_gbps,
    load_node_type,
    well_connected_groups,
)


def gpus_of(groups: list) -> list[tuple[int, ...]]:  # type: ignore[type-arg]
    return [g.gpus for g in groups]


def test_dgx1_quads_first() -> None:
    t = load_node_type("dgx1-v100")
    best = well_connected_groups(t, range(8), 4, limit=2)
    assert gpus_of(best) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert best[0].busbw_gbps == estimate_node(t, [0, 1, 2, 3]).busbw_gbps


def test_h100_nvl_pairs_for_two() -> None:
    t = load_node_type("h100-nvl-pairs")
    assert gpus_of(well_connected_groups(t, range(8), 2, limit=4)) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # One GPU: take the one whose partner is already gone, so the intact pair stays whole.
    assert gpus_of(well_connected_groups(t, [1, 2, 3], 1, limit=1)) == [(1,)]
    # Four GPUs in one socket beat four across sockets.
    assert gpus_of(well_connected_groups(t, range(8), 4, limit=1)) == [(0, 1, 2, 3)]


def test_nvswitch_groups_are_on_one_socket_first_then_in_index_order() -> None:
    t = load_node_type("hgx-h100")  # GPUs 0-3 on NUMA node 0, 4-7 on NUMA node 1
    groups = well_connected_groups(t, range(8), 3)
    socket = {g: 0 if g < 4 else 1 for g in range(8)}
    one = [c for c in combinations(range(8), 3) if len({socket[g] for g in c}) == 1]
    assert gpus_of(groups) == one + [c for c in combinations(range(8), 3) if c not in one]
    assert len({g.busbw_gbps for g in groups}) == 1


def test_free_set_and_limit() -> None:
    t = load_node_type("hgx-h100")
    assert gpus_of(well_connected_groups(t, [7, 5, 1], 2)) == [(5, 7), (1, 5), (1, 7)]
    assert well_connected_groups(t, [1, 2], 3) == []
    assert well_connected_groups(t, range(8), 2, limit=0) == []
    assert len(well_connected_groups(t, range(8), 2, limit=5)) == 5
    assert well_connected_groups(t, range(8), 2, limit=5) == well_connected_groups(t, range(8), 2)[:5]


def test_down_and_degraded_links_and_unhealthy_gpus_are_left_out() -> None:
    t = load_node_type("hgx-h100").with_link_state(0, 1, LinkState.DOWN).with_link_state(2, 3, LinkState.DEGRADED)
    t = t.with_gpu_health(4, GpuHealthState.UNHEALTHY)
    for group in well_connected_groups(t, range(8), 2):
        assert set(group.gpus) not in ({0, 1}, {2, 3})
        assert 4 not in group.gpus
    assert all(4 not in g.gpus for g in well_connected_groups(t, range(8), 1))
    assert len(well_connected_groups(t, range(8), 8)) == 0


def test_degraded_gpus_rank_after_healthy_ones() -> None:
    t = load_node_type("hgx-h100").with_gpu_health(0, GpuHealthState.DEGRADED, "throttling")
    assert gpus_of(well_connected_groups(t, range(8), 2, limit=1)) == [(1, 2)]
    assert len(well_connected_groups(t, range(8), 2)) == 28


def test_intra_node_requirements() -> None:
    pairs = load_node_type("h100-nvl-pairs")
    assert gpus_of(well_connected_groups(pairs, range(8), 2, IntraNode.NVLINK)) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert well_connected_groups(pairs, range(8), 3, IntraNode.NVLINK) == []
    assert well_connected_groups(pairs, range(8), 2, IntraNode.NVSWITCH) == []
    dgx1 = load_node_type("dgx1-v100")
    nv4 = gpus_of(well_connected_groups(dgx1, range(8), 4, IntraNode.NVLINK))
    assert nv4 == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert len(well_connected_groups(load_node_type("hgx-h100"), range(8), 8, IntraNode.NVSWITCH)) == 1
    assert well_connected_groups(load_node_type("rtx4090-pcie"), range(8), 2, IntraNode.NVLINK) == []
    assert well_connected_groups(load_node_type("rtx4090-pcie"), range(8), 2, "any")  # type: ignore[arg-type]


def test_errors() -> None:
    t = load_node_type("hgx-h100")
    with pytest.raises(TopologyError):
        well_connected_groups(t, [9], 1)
    with pytest.raises(TopologyError):
        well_connected_groups(t, range(8), 0)
    with pytest.raises(TopologyError):
        well_connected_groups(t, range(8), 1, limit=-1)


def test_sixteen_gpu_nvswitch_with_a_degraded_gpu() -> None:
    t = node(16).gpu_model("NVIDIA H100 80GB HBM3").nvswitch(18).build()
    for b in range(16):
        if b != 5:
            t = t.with_link_state(5, b, LinkState.DEGRADED, nvlinks=17)
    best = well_connected_groups(t, range(16), 8, limit=3)
    assert gpus_of(best) == [(0, 1, 2, 3, 4, 6, 7, 8), (0, 1, 2, 3, 4, 6, 7, 9), (0, 1, 2, 3, 4, 6, 7, 10)]
    assert len(well_connected_groups(t, range(16), 15)) == 1


def test_results_are_memoised_copies() -> None:
    t = load_node_type("dgx1-v100")
    first = well_connected_groups(t, range(8), 2)
    first.clear()
    assert well_connected_groups(t, range(8), 2)


# -- against brute force -----------------------------------------------------------------------------------------


def brute(t: Topology, free: list[int], k: int, intra: IntraNode) -> list[tuple[float, tuple[int, ...]]]:
    def ok(a: int, b: int) -> bool:
        link = t.link(a, b)
        if link.state is not LinkState.UP:
            return False
        if intra is IntraNode.NVSWITCH:
            return link.kind is LinkKind.NVSWITCH
        if intra is IntraNode.NVLINK:
            return link.is_nvlink and link.nvlinks > 0
        return True

    healthy = sorted(g for g in free if t.gpus[g].healthy)
    out = []
    for combo in combinations(healthy, k):
        if all(ok(a, b) for a, b in combinations(combo, 2)):
            out.append((round(estimate_node(t, combo).busbw_gbps, 9), combo))
    return out


@settings(max_examples=150, deadline=None)
@given(topologies(max_gpus=7), st.data())
def test_same_groups_as_brute_force_best_first(t: Topology, data: st.DataObject) -> None:
    for g in range(t.gpu_count):
        health = data.draw(
            st.sampled_from([GpuHealthState.HEALTHY] * 3 + [GpuHealthState.DEGRADED, GpuHealthState.UNHEALTHY])
        )
        if health is not GpuHealthState.HEALTHY:
            t = t.with_gpu_health(g, health)
    free = data.draw(st.lists(st.integers(0, t.gpu_count - 1), unique=True, min_size=1))
    k = data.draw(st.integers(1, len(free)))
    intra = data.draw(st.sampled_from(list(IntraNode)))
    got = well_connected_groups(t, free, k, intra)
    expected = brute(t, free, k, intra)
    assert sorted(g.gpus for g in got) == sorted(c for _, c in expected)
    values = [round(g.busbw_gbps, 9) for g in got]
    assert values == sorted(values, reverse=True)
    by_gpus = dict((c, v) for v, c in expected)
    assert all(round(g.busbw_gbps, 9) == by_gpus[g.gpus] for g in got)
    assert [g.gpus for g in got] == sorted(by_gpus, key=lambda c: order_key(t, free, c, by_gpus[c]))


def order_key(
    t: Topology, free: list[int], group: tuple[int, ...], busbw: float
) -> tuple[float, int, tuple[tuple[float, ...], ...], int, int, float, tuple[int, ...]]:
    """The documented order: bandwidth, fewer Degraded GPUs, the remainder that serves the next jobs best,
    fewer NUMA nodes and nearest-NIC sets, the best connected remainder, lowest indices."""
    rest = tuple(sorted(g for g in free if t.gpus[g].healthy and g not in group))
    pair_sum = sum(hop_gbps(t, a, b) for a, b in combinations(rest, 2))
    sick = sum(1 for g in group if t.gpus[g].health is GpuHealthState.DEGRADED)
    left = tuple(tuple(-bw for bw in packing(t, rest, cap)) for cap in (8, 4, 2))
    numa = len({t.gpus[g].numa_node for g in group} - {None})
    nics = len({nearest_nic_set(t, g) for g in group})
    return (-busbw, sick, left, numa, nics, -round(pair_sum, 9), group)


def packing(t: Topology, free: tuple[int, ...], cap: int) -> tuple[float, ...]:
    """Brute force: pack the free GPUs with jobs of at most ``cap`` (8, 4, 2, 1), the largest that fits first,
    each the fastest group, among equals the one whose own remainder packs best."""
    k = next((size for size in (8, 4, 2, 1) if size <= min(cap, len(free))), 0)
    if k == 0:
        return ()
    scored = [(round(estimate_node(t, c).busbw_gbps, 9), c) for c in combinations(free, k)]
    top = max(bw for bw, _ in scored)
    rests = [tuple(g for g in free if g not in c) for bw, c in scored if bw == top]
    return (top, *max(packing(t, r, cap) for r in rests))


def nearest_nic_set(t: Topology, gpu: int) -> tuple[int, ...]:
    up = [j for j, nic in enumerate(t.nics) if nic.up]
    if not up:
        return ()
    level = min(PCIE_LEVELS.index(t.nics[j].distance(gpu)) for j in up)
    return tuple(j for j in up if PCIE_LEVELS.index(t.nics[j].distance(gpu)) == level)


@st.composite
def symmetric_nodes(draw: st.DrawFn) -> Topology:
    """Nodes with many interchangeable GPUs (sockets, bridge pairs, NVSwitch) and a few faults."""
    n = draw(st.integers(2, 8))
    socket = draw(st.sampled_from([n, max(1, n // 2)]))
    pairs = draw(st.booleans())
    switched = draw(st.booleans())
    b = node(n).gpu_model(draw(st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"])))
    if switched:
        b = b.nvswitch(18)
    for x in range(n):
        for y in range(x + 1, n):
            if switched:
                continue
            if pairs and x // 2 == y // 2:
                b = b.nvlink(x, y, 12)
            else:
                b = b.pcie(x, y, "NODE" if x // socket == y // socket else "SYS")
    t = b.build()
    for _ in range(draw(st.integers(0, 2))):
        x, y = draw(st.sampled_from(sorted(t.links)))
        t = t.with_link_state(x, y, draw(st.sampled_from([LinkState.DOWN, LinkState.DEGRADED])))
    return t


@settings(max_examples=150, deadline=None)
@given(symmetric_nodes(), st.data())
def test_symmetric_nodes_match_brute_force(t: Topology, data: st.DataObject) -> None:
    test_same_groups_as_brute_force_best_first.hypothesis.inner_test(t, data)  # type: ignore[attr-defined]
