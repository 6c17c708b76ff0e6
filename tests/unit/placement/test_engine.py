"""Named cases on real topologies (the catalog's node types, built from the shared nvidia-smi fixtures)."""

from __future__ import annotations

import pytest
from placement_builders import node, snapshot

from gputopo.api.trainingjob import IntraNode
from gputopo.placement import Placement, Request, Snapshot, Unplaceable, place
from gputopo.topology.estimate import NVLINK_RING_EFFICIENCY


def placed(snap: Snapshot, request: Request) -> Placement:
    result = place(snap, request)
    assert isinstance(result, Placement), str(result)
    assert len(result.workers) == request.workers
    return result


@pytest.mark.parametrize(
    ("snap", "request_", "gpus"),
    [
        (
            snapshot(node("v100", "dgx1-v100")),
            Request(1, 2),
            {(1, 2), (0, 3), (0, 4), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)},
        ),
        (snapshot(node("v100", "dgx1-v100").used(1, 2, 0, 3)), Request(1, 2), {(4, 7), (5, 6), (6, 7)}),
        (snapshot(node("nvl", "h100-nvl-pairs")), Request(1, 4), {(0, 1, 2, 3), (4, 5, 6, 7)}),
        (snapshot(node("nvl", "h100-nvl-pairs").used(0)), Request(1, 4), {(4, 5, 6, 7)}),
        (snapshot(node("nvl", "h100-nvl-pairs").used(0, 4)), Request(1, 2), {(2, 3), (6, 7)}),
    ],
    ids=[
        "dgx1-2gpu-takes-an-NV2-pair",
        "dgx1-2gpu-NV2-pair-on-the-other-half",
        "h100-nvl-4gpu-two-bridged-pairs-one-socket",
        "h100-nvl-4gpu-avoids-the-broken-pair",
        "h100-nvl-2gpu-takes-a-whole-bridge",
    ],
)
def test_group_choice_on_one_node(snap: Snapshot, request_: Request, gpus: set[tuple[int, ...]]) -> None:
    assert placed(snap, request_).workers[0].gpus in gpus


def test_two_gpu_job_leaves_the_rest_best_connected() -> None:
    # On 8x H100 NVL pairs, a 2-GPU job takes a whole bridged pair, so pairs stay whole for the next jobs.
    # The calibrated estimator rates a bridge (NV12, 300 GB/s per direction) at its ring efficiency, not
    # at the raw 300 GB/s the engine's former stand-in model reported; a PCIe pair is far below either.
    snap = snapshot(node("nvl", "h100-nvl-pairs"))
    for _ in range(4):
        result = placed(snap, Request(1, 2))
        assert result.busbw_gbps == pytest.approx(NVLINK_RING_EFFICIENCY * 300.0)
        snap = snap.reserve(result)


def test_down_link_is_never_used() -> None:
    snap = snapshot(node("nvl", "h100-nvl-pairs").link_down(0, 1).link_down(2, 3).link_down(4, 5))
    result = placed(snap, Request(1, 2, intra_node=IntraNode.NVLINK))
    assert result.workers[0].gpus == (6, 7)
    refused = place(snap.reserve(result), Request(1, 2, intra_node=IntraNode.NVLINK))
    assert isinstance(refused, Unplaceable)


def test_down_link_is_not_inside_any_group() -> None:
    snap = snapshot(node("h", "hgx-h100").link_down(0, 1))
    result = placed(snap, Request(1, 7))
    gpus = set(result.workers[0].gpus)
    assert not {0, 1} <= gpus


def test_unhealthy_gpu_is_not_used() -> None:
    snap = snapshot(node("h", "hgx-h100").unhealthy(3))
    assert 3 not in placed(snap, Request(1, 7)).workers[0].gpus
    assert isinstance(place(snap, Request(1, 8)), Unplaceable)


@pytest.mark.parametrize(
    ("snap", "request_", "words"),
    [
        (
            snapshot(
                *(node(f"b{i}").leaf("rack-b", "spine-1") for i in range(3)),
                *(node(f"a{i}").leaf(f"rack-a{i}", f"spine-{i + 2}") for i in range(2)),
            ),
            Request(4, 8, intra_node=IntraNode.NVSWITCH, required_tier=1),
            "needs 4 nodes with 8 free NVSwitch GPUs under one tier-1 switch; the largest such domain has 3",
        ),
        (snapshot(node("v100", "dgx1-v100")), Request(1, 4, intra_node=IntraNode.NVSWITCH), "no node has them"),
        (snapshot(node("h").not_ready()), Request(1, 1), "1 not ready"),
        (snapshot(node("h").taint("gpu", "reserved")), Request(1, 1), "1 untolerated taint"),
        (snapshot(node("h").used(0)), Request(1, 8), "1 node lacks 8 free healthy GPUs"),
    ],
    ids=["tier-1-domain-too-small", "no-nvswitch", "not-ready", "tainted", "too-few-free"],
)
def test_refusal_says_why(snap: Snapshot, request_: Request, words: str) -> None:
    result = place(snap, request_)
    assert isinstance(result, Unplaceable)
    assert words in str(result)


def test_refusal_names_the_largest_domain() -> None:
    snap = snapshot(*(node(f"b{i}").leaf("rack-b", "rack-b") for i in range(3)))
    result = place(snap, Request(4, 8, required_tier=1))
    assert isinstance(result, Unplaceable)
    assert result.reason.endswith("has 3 (rack-b)")


def test_multi_node_job_stays_under_one_leaf_when_it_can() -> None:
    snap = snapshot(
        node("a1").leaf("leaf-a"), node("b1").leaf("leaf-b"), node("a2").leaf("leaf-a"),
        node("b2").leaf("leaf-b").used(0), node("c1").leaf("leaf-c"),
    )  # fmt: skip
    result = placed(snap, Request(2, 8))
    assert set(result.nodes) == {"a1", "a2"}
    assert (result.tier, result.tier_domain) == (0, "spine-a/leaf-a")


def test_ranks_keep_leaf_neighbours_adjacent() -> None:
    snap = snapshot(*(node(f"{leaf}{i}").leaf(f"leaf-{leaf}") for i in range(2) for leaf in "xy"))
    result = placed(snap, Request(4, 8))
    leaves = [w.node[0] for w in result.workers]
    assert leaves in (["x", "x", "y", "y"], ["y", "y", "x", "x"])
    assert [w.rank for w in result.workers] == [0, 1, 2, 3]


def test_large_free_leaf_stays_whole() -> None:
    # A 2-node job goes to the leaf that it fills, not the empty 4-node leaf.
    snap = snapshot(
        *(node(f"big{i}").leaf("leaf-big") for i in range(4)), *(node(f"small{i}").leaf("leaf-small") for i in range(2))
    )
    assert placed(snap, Request(2, 8)).tier_domain == "spine-a/leaf-small"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (Request(2, 8, same_model=True), {"h100"}),
        (Request(2, 8, same_model=True, same_driver=True), {"h100-new"}),
    ],
    ids=["same-model", "same-model-and-driver"],
)
def test_gang_sameness(request_: Request, expected: set[str]) -> None:
    snap = snapshot(
        node("h100-old-1").leaf("l").driver("535"), node("h100-new-1").leaf("l").driver("570"),
        node("h100-new-2").leaf("l").driver("570"), node("a100", "dgx-a100").leaf("l"),
    )  # fmt: skip
    result = placed(snap, request_)
    models = {snap.node(n).gpu_model for n in result.nodes}
    drivers = {snap.node(n).driver_version for n in result.nodes}
    assert len(models) == 1 and "H100" in models.pop()
    if request_.same_driver:
        assert drivers == {"570"}
    assert all(any(n.startswith(e) for e in expected) for n in result.nodes)


def test_selectors_and_tolerations() -> None:
    from gputopo.placement import NodeSelectorOperator, NodeSelectorRequirement, Toleration

    snap = snapshot(node("plain"), node("tainted").taint("dedicated", "ml").label("pool", "ml"))
    request = Request(
        1, 8,
        node_selector={"pool": "ml"},
        affinity_terms=((NodeSelectorRequirement("pool", NodeSelectorOperator.IN, ("ml",)),),),
        tolerations=(Toleration("dedicated", "Equal", "ml"),),
    )  # fmt: skip
    assert placed(snap, request).nodes == ("tainted",)


def test_nearest_nics_per_rank() -> None:
    result = placed(snapshot(node("h")), Request(1, 2))
    assert result.workers[0].nics == tuple(f"mlx5_{g}" for g in result.workers[0].gpus)


def test_min_bus_bandwidth_refused_with_the_figure() -> None:
    result = place(snapshot(node("p", "rtx4090-pcie")), Request(1, 4, min_busbw_gbps=100))
    assert isinstance(result, Unplaceable)
    assert "below the required 100 GB/s" in result.reason
