"""Planning with the device plugin's choice: the plan is what the kubelet will give, and nodes are compared by it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import node, snapshot

from gputopo.placement import GpuChoice, Placement, Request, Snapshot, Unplaceable, place
from gputopo.topology.device_plugin import kubelet_choice


def _kubelet_gives(snap: Snapshot, placement: Placement) -> list[tuple[str, tuple[int, ...]]]:
    """Each rank's GPUs as the kubelet hands them out: ranks of a node in rank order, each from what is left."""
    free = {n.name: sorted(n.free_gpus - {g.index for g in n.topology.gpus if not g.healthy}) for n in snap}
    out = []
    for worker in placement.workers:
        topology = snap.node(worker.node).topology
        chosen = kubelet_choice(topology, free[worker.node], len(worker.gpus))
        assert chosen is not None
        free[worker.node] = [g for g in free[worker.node] if g not in chosen]
        out.append((worker.node, chosen))
    return out


@pytest.mark.parametrize(
    ("snap", "request_"),
    [
        (snapshot(node("v100", "dgx1-v100")), Request(3, 2)),
        (snapshot(node("v100", "dgx1-v100").used(0, 1)), Request(2, 1)),
        (snapshot(node("nvl", "h100-nvl-pairs").used(0, 4)), Request(1, 2)),
        (snapshot(node("a", "hgx-h100").leaf("l1"), node("b", "hgx-h100").leaf("l1").used(3)), Request(3, 4)),
        (snapshot(node("a", "dgx1-v100").leaf("l1"), node("b", "dgx1-v100").leaf("l1")), Request(4, 4)),
    ],
    ids=[
        "dgx1-three-pairs",
        "dgx1-two-singles-after-a-used-pair",
        "h100-nvl-pair-after-used-gpus",
        "hgx-two-nodes-one-with-a-used-gpu",
        "dgx1-two-nodes-four-halves",
    ],
)
def test_the_plan_is_the_device_plugins_choice_rank_after_rank(snap: Snapshot, request_: Request) -> None:
    result = place(snap, replace(request_, gpu_choice=GpuChoice.DEVICE_PLUGIN))
    assert isinstance(result, Placement), str(result)
    assert [(w.node, w.gpus) for w in result.workers] == _kubelet_gives(snap, result)


def test_the_estimate_is_of_the_gpus_the_device_plugin_gives() -> None:
    """Three pairs on a DGX-1: gputopo would take NV-linked pairs on one ring; the plugin takes its best
    partition's pairs one after another, and the figure says so."""
    snap = snapshot(node("v100", "dgx1-v100"))
    ours = place(snap, Request(3, 2))
    theirs = place(snap, Request(3, 2, gpu_choice=GpuChoice.DEVICE_PLUGIN))
    assert isinstance(ours, Placement) and isinstance(theirs, Placement)
    assert [w.gpus for w in theirs.workers] == [(0, 3), (1, 2), (4, 7)]
    assert theirs.busbw_gbps < ours.busbw_gbps


def test_a_node_whose_device_plugin_pick_breaks_the_gang_offers_nothing() -> None:
    """NVLink 0-1 is down on an HGX node: the plugin, blind to NVSwitch links, still picks GPUs 0 and 1."""
    snap = snapshot(node("h", "hgx-h100").link_down(0, 1))
    assert isinstance(place(snap, Request(1, 2)), Placement)
    assert isinstance(place(snap, Request(1, 2, gpu_choice=GpuChoice.DEVICE_PLUGIN)), Unplaceable)
