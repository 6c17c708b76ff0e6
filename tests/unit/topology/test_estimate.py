"""The bus bandwidth estimator: named cases, NIC matching, and properties (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topo_builders import node

from gputopo.api.nodetopology import LinkKind, LinkState, NicState
from gputopo.topology import (
    Gpu,
    Link,
    Nic,
    SystemFacts,
    Topology,
    TopologyError,
    estimate_gang,
    estimate_node,
    load_node_type,
    nearest_nics,
    nic_assignment,
    well_connected_groups,
)
from gputopo.topology.estimate import NET_EFFICIENCY, NVLINK_RING_EFFICIENCY, NVLS_ALGBW_EFFICIENCY

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize(
    ("node_type", "gpus", "expected"),
    [
        ("hgx-h100", range(8), NVLS_ALGBW_EFFICIENCY * 450 * 2 * 7 / 8),
        ("hgx-h100", range(4), NVLS_ALGBW_EFFICIENCY * 450 * 2 * 3 / 4),
        ("hgx-h100", [0, 5], NVLINK_RING_EFFICIENCY * 450),  # two GPUs: the ring beats NVLS
        ("dgx-a100", range(8), NVLINK_RING_EFFICIENCY * 300),  # NVLink3: no NVLS
        ("a100-polaris", range(4), NVLINK_RING_EFFICIENCY * 3 * 4 * 25),
        ("a100-polaris", [0, 1], NVLINK_RING_EFFICIENCY * 4 * 25),
        ("dgx1-v100", range(8), NVLINK_RING_EFFICIENCY * 6 * 25),
        ("dgx1-v100", [0, 1, 2, 3], NVLINK_RING_EFFICIENCY * 4 * 25),  # GPU0 has 1+1+2 links in its quad
        ("dgx1-v100", [0, 1, 4, 5], NVLINK_RING_EFFICIENCY * 2 * 25),  # the {0,4}|{1,5} cut has 1+1 links
        ("rtx3090-nvlink", [0, 1], NVLINK_RING_EFFICIENCY * 4 * 14.0625),
        ("h100-nvl-pairs", [0, 1], NVLINK_RING_EFFICIENCY * 12 * 25),
    ],
    ids=lambda v: str(v) if not isinstance(v, float) else f"{v:.0f}",
)
def test_named_cases(node_type: str, gpus: range | list[int], expected: float) -> None:
    assert estimate_node(load_node_type(node_type), list(gpus)).busbw_gbps == pytest.approx(expected)


def test_bottlenecks_say_what_limits() -> None:
    assert "NVLink SHARP" in estimate_node(load_node_type("hgx-h100"), range(8)).bottleneck
    assert "ring" in estimate_node(load_node_type("dgx-a100"), range(8)).bottleneck
    assert "PCIe NODE hop" in estimate_node(load_node_type("h100-nvl-pairs"), [0, 1, 2, 3]).bottleneck
    assert "PCIe SYS hop" in estimate_node(load_node_type("h100-nvl-pairs"), [0, 4]).bottleneck
    assert "single GPU" in estimate_node(load_node_type("hgx-h100"), [3]).bottleneck


def test_pcie_levels_order_hops() -> None:
    t = node(6).all("SYS").pcie(0, 1, "PIX").pcie(2, 3, "PXB").pcie(4, 5, "PHB").build()
    pix, pxb, phb = (estimate_node(t, [a, a + 1]).busbw_gbps for a in (0, 2, 4))
    sys_ = estimate_node(t, [0, 2]).busbw_gbps
    assert pix > pxb > phb > sys_ > 0


def test_nvlink_pairs_joined_by_pcie_are_pcie_bound() -> None:
    t = load_node_type("h100-nvl-pairs")
    assert estimate_node(t, [0, 1, 2, 3]).busbw_gbps < estimate_node(t, [0, 1]).busbw_gbps / 10


def test_down_nvlink_falls_back_to_host_memory() -> None:
    t = load_node_type("dgx1-v100")
    down = t.with_link_state(0, 1, LinkState.DOWN)
    assert estimate_node(down, [0, 1]).busbw_gbps < estimate_node(t, [0, 1]).busbw_gbps
    assert "Down" in estimate_node(down, [0, 1]).bottleneck


def test_degraded_nvswitch_gpu_limits_the_set() -> None:
    t = load_node_type("hgx-h100")
    fewer = t
    for b in range(8):
        if b != 2:
            fewer = fewer.with_link_state(2, b, LinkState.DEGRADED, nvlinks=12)
    assert estimate_node(fewer, range(8)).busbw_gbps < estimate_node(t, range(8)).busbw_gbps
    assert estimate_node(fewer, [0, 1, 3, 4]).busbw_gbps == estimate_node(t, [0, 1, 3, 4]).busbw_gbps


def test_errors() -> None:
    t = load_node_type("hgx-h100")
    with pytest.raises(TopologyError):
        estimate_node(t, [])
    with pytest.raises(TopologyError):
        estimate_node(t, [8])
    with pytest.raises(TopologyError):
        estimate_node(t, [1, 1])
    with pytest.raises(TopologyError):
        estimate_gang([])
    with pytest.raises(TopologyError):
        estimate_gang([(t, [0]), (t, [0])], oversubscription=0)


# -- several nodes ----------------------------------------------------------------------------------------------


def test_one_member_is_estimate_node() -> None:
    t = load_node_type("hgx-h100")
    assert estimate_gang([(t, [0, 1, 2, 3])]) == estimate_node(t, [0, 1, 2, 3])


def test_gang_over_nearest_nics() -> None:
    t = load_node_type("hgx-h100")  # one 400G NIC per GPU
    two = estimate_gang([(t, range(8)), (t, range(8))])
    assert two.busbw_gbps == pytest.approx(8 * 400 / 8 * NET_EFFICIENCY)
    assert "inter-node" in two.bottleneck and "8 NIC(s)" in two.bottleneck
    half = estimate_gang([(t, range(4)), (t, range(4))])
    assert half.busbw_gbps == pytest.approx(4 * 50 * NET_EFFICIENCY)
    assert estimate_gang([(t, range(8))] * 2, oversubscription=2).busbw_gbps == pytest.approx(two.busbw_gbps / 2)
    assert estimate_gang([(t, range(8))] * 2, nic_rate_gbps=200).busbw_gbps == pytest.approx(two.busbw_gbps / 2)


def test_gang_intra_node_can_be_the_bottleneck() -> None:
    t = load_node_type("h100-nvl-pairs")
    gang = estimate_gang([(t, [0, 1, 2, 3]), (t, [0, 1, 2, 3])])
    assert gang.bottleneck.startswith("intra-node")


def test_dgx_a100_spreads_gpus_over_both_nics_of_a_switch() -> None:
    t = load_node_type("dgx-a100")
    assert [n.name for n in nearest_nics(t, [0, 1])] == ["mlx5_0", "mlx5_1"]
    assert [n.name for n in nearest_nics(t, range(8))] == [f"mlx5_{i}" for i in range(8)]
    total, picks = nic_assignment(t, [0, 1])
    assert total == pytest.approx(2 * 200 / 8 * NET_EFFICIENCY)
    assert {j for js in picks.values() for j in js} == {0, 1}


def test_nearest_nics_skip_down_nics_and_share() -> None:
    t = load_node_type("hgx-h100").with_nic_state("mlx5_1", NicState.DOWN)
    names = [n.name for n in nearest_nics(t, [0, 1])]
    assert names[0] == "mlx5_0" and "mlx5_1" not in names
    # GPU1 falls back to the NODE-distance NICs of its socket, every one of them
    assert names == ["mlx5_0", "mlx5_2", "mlx5_3"]
    rtx = load_node_type("rtx4090-pcie")
    assert len(nearest_nics(rtx, range(8))) == 2


def test_node_without_nics_uses_host_network() -> None:
    t = load_node_type("p4d-a100")
    gang = estimate_gang([(t, range(8))] * 2)
    assert 0 < gang.busbw_gbps < 20 and "no Up RDMA NIC" in gang.bottleneck


def test_nic_down_never_raises_the_gang() -> None:
    t = load_node_type("hgx-a100")
    before = estimate_gang([(t, range(8))] * 2).busbw_gbps
    for nic in t.nics:
        t = t.with_nic_state(nic.name, NicState.DOWN)
        after = estimate_gang([(t, range(8))] * 2).busbw_gbps
        assert after <= before + 1e-9
        before = after


# -- properties ---------------------------------------------------------------------------------------------------

MODELS = [H100, A100, "Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 3090", "NVIDIA L40S", ""]
PCIE = [LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE, LinkKind.SYS]


@st.composite
def topologies(draw: st.DrawFn, max_gpus: int = 8) -> Topology:
    n = draw(st.integers(1, max_gpus))
    model = draw(st.sampled_from(MODELS))
    switched = draw(st.booleans())
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            state = draw(st.sampled_from([LinkState.UP] * 4 + [LinkState.DEGRADED, LinkState.DOWN]))
            if switched:
                links.append(Link(a, b, LinkKind.NVSWITCH, draw(st.integers(12, 18)), state))
            elif draw(st.booleans()):
                links.append(Link(a, b, LinkKind.NVLINK, draw(st.integers(1, 12)), state))
            else:
                links.append(Link(a, b, draw(st.sampled_from(PCIE)), 0, state))
    nics = [
        Nic(
            f"mlx5_{j}",
            rate_gbps=draw(st.sampled_from([100.0, 200.0, 400.0])),
            state=draw(st.sampled_from([NicState.UP, NicState.UP, NicState.DOWN])),
            affinity=tuple(draw(st.sampled_from(PCIE)) for _ in range(n)),
        )
        for j in range(draw(st.integers(0, 4)))
    ]
    gpus = [Gpu(i, model=model, pcie_generation=draw(st.sampled_from([0, 3, 4, 5]))) for i in range(n)]
    return Topology.build(gpus, links, nics, SystemFacts(nvswitch=switched))


@st.composite
def with_subset(draw: st.DrawFn) -> tuple[Topology, list[int]]:
    t = draw(topologies())
    gpus = draw(st.lists(st.integers(0, t.gpu_count - 1), min_size=1, max_size=t.gpu_count, unique=True))
    return t, gpus


def relabel(t: Topology, perm: list[int]) -> Topology:
    """The same node with GPU i renamed perm[i]."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    gpus = [replace(t.gpus[inverse[j]], index=j) for j in range(len(perm))]
    links = [Link(perm[link.a], perm[link.b], link.kind, link.nvlinks, link.state) for link in t.links.values()]
    nics = [replace(nic, affinity=tuple(nic.affinity[inverse[j]] for j in range(len(perm)))) for nic in t.nics]
    return Topology.build(gpus, links, nics, t.system)


@settings(max_examples=150, deadline=None)
@given(with_subset())
def test_symmetric(case: tuple[Topology, list[int]]) -> None:
    t, gpus = case
    for a in range(t.gpu_count):
        for b in range(t.gpu_count):
            if a != b:
                assert t.link(a, b) is t.link(b, a)
            assert t.nvlink_matrix[a][b] == t.nvlink_matrix[b][a]
    assert estimate_node(t, gpus) == estimate_node(t, list(reversed(gpus)))


@settings(max_examples=200, deadline=None)
@given(with_subset(), st.data())
def test_taking_a_link_down_never_raises_the_estimate(case: tuple[Topology, list[int]], data: st.DataObject) -> None:
    t, gpus = case
    if t.gpu_count < 2:
        return
    a, b = data.draw(st.sampled_from(sorted(t.links)))
    before = estimate_node(t, gpus).busbw_gbps
    down = t.with_link_state(a, b, LinkState.DOWN)
    assert estimate_node(down, gpus).busbw_gbps <= before + 1e-9
    if t.link(a, b).state is not LinkState.DOWN:  # losing one NVLink of a link that still carries traffic
        fewer = max(t.link(a, b).nvlinks - 1, 0)
        degraded = t.with_link_state(a, b, LinkState.DEGRADED, nvlinks=fewer)
        assert estimate_node(degraded, gpus).busbw_gbps <= before + 1e-9
    gang_before = estimate_gang([(t, gpus), (t, gpus)]).busbw_gbps
    assert estimate_gang([(down, gpus), (t, gpus)]).busbw_gbps <= gang_before + 1e-9


@settings(max_examples=200, deadline=None)
@given(with_subset(), st.randoms(use_true_random=False))
def test_relabeling_gpus_does_not_change_the_estimate(case: tuple[Topology, list[int]], rnd: object) -> None:
    t, gpus = case
    perm = list(range(t.gpu_count))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    moved = relabel(t, perm)
    mapped = [perm[g] for g in gpus]
    assert close(estimate_node(moved, mapped).busbw_gbps, estimate_node(t, gpus).busbw_gbps)
    assert close(
        estimate_gang([(moved, mapped)] * 2, oversubscription=1.5).busbw_gbps,
        estimate_gang([(t, gpus)] * 2, oversubscription=1.5).busbw_gbps,
    )
    k = len(gpus)
    best = well_connected_groups(t, range(t.gpu_count), k, limit=1)
    best_moved = well_connected_groups(moved, range(t.gpu_count), k, limit=1)
    assert [round(g.busbw_gbps, 6) for g in best] == [round(g.busbw_gbps, 6) for g in best_moved]
