"""The NICs a worker is given (its NCCL_IB_HCA) on Grace trays: every compute rail of its GPUs' own Grace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputopo.api.nodetopology import NicRole
from gputopo.placement import NodeInfo, Placement, Request, Snapshot, place
from gputopo.topology.catalog import load_node_type
from gputopo.topology.model import Topology


def _tray(roles: dict[str, NicRole]) -> Topology:
    tray = load_node_type("gb200-tray")
    nics = tuple(replace(n, role=roles.get(n.name, NicRole.COMPUTE)) for n in tray.nics)
    return Topology(tray.gpus, tray.links, nics, tray.system)


GRACE_NICS = {0: ("mlx5_0", "mlx5_1"), 1: ("mlx5_2", "mlx5_3")}  # the tray's two NICs per Grace


@pytest.mark.parametrize(
    ("roles", "gpus"),
    [
        ({}, 4),
        ({"mlx5_1": NicRole.STORAGE}, 4),
        ({"mlx5_0": NicRole.FRONT_END, "mlx5_3": NicRole.STORAGE}, 4),
        ({}, 2),
        ({"mlx5_2": NicRole.STORAGE}, 1),
    ],
    ids=["all-compute", "one-storage", "front-end-and-storage", "two-gpus-one-grace", "one-gpu"],
)
def test_workers_get_the_compute_rails_of_their_grace(roles: dict[str, NicRole], gpus: int) -> None:
    snap = Snapshot(NodeInfo(f"tray-{i}", _tray(roles), driver_version="570.172.08") for i in range(2))
    result = place(snap, Request(2, gpus))
    assert isinstance(result, Placement), str(result)
    for worker in result.workers:
        graces = sorted({g // 2 for g in worker.gpus})
        expected = tuple(n for grace in graces for n in GRACE_NICS[grace] if n not in roles)
        assert worker.nics == expected
