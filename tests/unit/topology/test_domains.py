"""Multi-node NVLink domains in the estimator: one NVLink group per domain, NICs only between domains."""

from __future__ import annotations

import pytest

from gputopo.api.nodetopology import LinkState
from gputopo.topology import TopologyError, estimate_node, load_node_type
from gputopo.topology.estimate import NET_EFFICIENCY, NVLINK_RING_EFFICIENCY, nvlink_fabric
from gputopo.topology.gang import MNNVL_NVLS_ALGBW_EFFICIENCY, domain_bandwidth, estimate_gang, split_evenly

TRAY = load_node_type("gb200-tray")
ALL = [0, 1, 2, 3]
NVLINK5_GPU = 18 * 50.0  # GB/s per direction


def trays(n: int) -> list[tuple[object, list[int]]]:
    return [(TRAY, ALL)] * n


@pytest.mark.parametrize(
    ("domains", "expected", "where"),
    [
        (["r0", "r0"], MNNVL_NVLS_ALGBW_EFFICIENCY * NVLINK5_GPU * 2 * 7 / 8, "intra-domain"),
        (["r0"] * 18, MNNVL_NVLS_ALGBW_EFFICIENCY * NVLINK5_GPU * 2 * 71 / 72, "intra-domain"),
        (["r0", "r1"], 4 * 50 * NET_EFFICIENCY, "inter-domain"),
        (["r0", "r0", "r1", "r1"], 8 * 50 * NET_EFFICIENCY, "inter-domain"),  # a domain's NICs add up
        (["r0", "r0", "r0", "r1"], 4 * 50 * NET_EFFICIENCY, "inter-domain"),  # the smaller slice limits
        (["", ""], 4 * 50 * NET_EFFICIENCY, "inter-node"),  # no domain: plain nodes
    ],
    ids=["2-trays-1-domain", "full-rack", "2-trays-2-domains", "2x2", "3+1-unbalanced", "no-domain"],
)
def test_domain_gangs(domains: list[str], expected: float, where: str) -> None:
    result = estimate_gang(trays(len(domains)), domains=domains)
    assert result.busbw_gbps == pytest.approx(expected)
    assert result.bottleneck.startswith(where)


def test_without_domains_nothing_changes() -> None:
    assert estimate_gang(trays(3)) == estimate_gang(trays(3), domains=["", "", ""])


def test_a_node_off_the_fabric_is_a_group_of_its_own() -> None:
    # A tray whose GPU lost every fabric link cannot use the domain: its bytes leave over its NICs.
    broken = TRAY
    for b in (1, 2, 3):
        broken = broken.with_link_state(0, b, LinkState.DOWN)
    assert nvlink_fabric(broken, [0])[0] == 0
    healthy = estimate_gang(trays(2), domains=["r0", "r0"])
    mixed = estimate_gang([(TRAY, ALL), (broken, ALL)], domains=["r0", "r0"])
    assert mixed.busbw_gbps < healthy.busbw_gbps
    assert "inter-domain" in mixed.bottleneck or "intra-node" in mixed.bottleneck


def test_one_domain_beats_two_and_two_beat_three() -> None:
    one = estimate_gang(trays(6), domains=["a"] * 6).busbw_gbps
    two = estimate_gang(trays(6), domains=["a"] * 3 + ["b"] * 3).busbw_gbps
    three = estimate_gang(trays(6), domains=["a", "a", "b", "b", "c", "c"]).busbw_gbps
    assert one > two > three  # between domains each slice pushes through its own trays' NICs
    assert two == pytest.approx(12 * 50 * NET_EFFICIENCY)
    assert three == pytest.approx(8 * 50 * NET_EFFICIENCY)


def test_domain_bandwidth_ring_without_sharp() -> None:
    assert domain_bandwidth(8, NVLINK5_GPU, nvls=False) == (NVLINK_RING_EFFICIENCY * NVLINK5_GPU, "ring")
    assert domain_bandwidth(1, NVLINK5_GPU, nvls=True)[1] == "ring"


def test_single_tray_is_the_node_estimate() -> None:
    assert estimate_gang(trays(1), domains=["r0"]) == estimate_node(TRAY, ALL)


@pytest.mark.parametrize(
    ("total", "parts", "expected"),
    [(24, 2, [12, 12]), (48, 3, [16, 16, 16]), (7, 3, [3, 2, 2]), (5, 5, [1] * 5)],
    ids=["24-over-2", "48-over-3", "7-over-3", "one-each"],
)
def test_split_evenly(total: int, parts: int, expected: list[int]) -> None:
    assert split_evenly(total, parts) == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: estimate_gang(trays(2), domains=["r0"]), "2 gang members"),
        (lambda: split_evenly(2, 3), "cannot spread"),
        (lambda: split_evenly(2, 0), "cannot spread"),
    ],
    ids=["domains-length", "more-parts-than-items", "no-parts"],
)
def test_bad_input(call: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        call()  # type: ignore[operator]
