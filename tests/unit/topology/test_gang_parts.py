"""The per-node parts of a gang estimate that placement memoises: inter-node bandwidth and the pair rule."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from gputopo.api.nodetopology import LinkState, NicState
from gputopo.api.trainingjob import IntraNode
from gputopo.topology import (
    TopologyError,
    estimate_gang,
    estimate_node,
    inter_node_bandwidth,
    load_node_type,
    pair_allowed,
    well_connected_groups,
)
from gputopo.topology.catalog import NODE_TYPES


@pytest.mark.parametrize("name", sorted(NODE_TYPES))
@pytest.mark.parametrize("oversubscription", [1.0, 2.0, 4.0])
def test_gang_is_the_minimum_of_the_node_parts(name: str, oversubscription: float) -> None:
    t = load_node_type(name)
    for size in range(1, t.gpu_count + 1):
        gpus = list(range(size))
        gang = estimate_gang([(t, gpus), (t, gpus)], oversubscription=oversubscription)
        parts = min(estimate_node(t, gpus).busbw_gbps, inter_node_bandwidth(t, gpus).busbw_gbps / oversubscription)
        assert math.isclose(gang.busbw_gbps, parts, rel_tol=1e-12)


def test_inter_node_bandwidth_names_the_nics_and_falls_back_to_host_networking() -> None:
    t = load_node_type("hgx-h100")
    assert "mlx5_0" in inter_node_bandwidth(t, [0]).bottleneck
    bare = t
    for nic in t.nics:
        bare = bare.with_nic_state(nic.name, NicState.DOWN)
    fallback = inter_node_bandwidth(bare, [0])
    assert "host network" in fallback.bottleneck
    assert 0 < fallback.busbw_gbps < inter_node_bandwidth(t, [0]).busbw_gbps


@pytest.mark.parametrize("gpus", [[], [8], [0, 0]], ids=["empty", "out-of-range", "repeated"])
def test_inter_node_bandwidth_rejects_bad_gpu_sets(gpus: list[int]) -> None:
    with pytest.raises(TopologyError):
        inter_node_bandwidth(load_node_type("hgx-h100"), gpus)


@pytest.mark.parametrize("name", ["hgx-h100", "dgx1-v100", "h100-nvl-pairs", "rtx4090-pcie"])
@pytest.mark.parametrize("intra", list(IntraNode))
def test_pair_rule_is_the_group_rule(name: str, intra: IntraNode) -> None:
    t = load_node_type(name).with_link_state(0, 1, LinkState.DOWN)
    groups = {g.gpus for g in well_connected_groups(t, range(t.gpu_count), 2, intra)}
    assert groups == {(a, b) for a, b in combinations(range(t.gpu_count), 2) if pair_allowed(t, a, b, intra)}
    assert not pair_allowed(t, 0, 1, intra)
