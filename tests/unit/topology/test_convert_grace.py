"""NodeTopology status <-> topology for Grace nodes: a GPU's NVLink-C2C and its own Grace's NICs, NIC roles."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputopo.api.nodetopology import LinkKind, NicRole, NodeTopologyStatus
from gputopo.topology import Gpu, Link, Nic, SystemFacts, Topology, from_status, to_status

K = LinkKind


def _nic(name: str, grace: int, *, role: NicRole | None, layer: str = "InfiniBand", route: bool = False) -> Nic:
    affinity = tuple(K.NODE if gpu // 2 == grace else K.SYS for gpu in range(4))
    return Nic(
        name, link_layer=layer, rate_gbps=400, numa_node=grace, affinity=affinity, role=role, default_route=route
    )


def gb200_tray() -> Topology:
    """4 GPUs, two per Grace over C2C; 2 compute NICs per Grace, a storage and a front-end port."""
    gpus = [
        Gpu(i, model="NVIDIA GB200", numa_node=i // 2, nvlink_version=5, c2c_links=10, c2c_gbps=450.0) for i in range(4)
    ]
    links = [Link(a, b, K.NVSWITCH, 18) for a in range(4) for b in range(a + 1, 4)]
    nics = [
        _nic("mlx5_0", 0, role=NicRole.COMPUTE),
        _nic("mlx5_1", 0, role=NicRole.COMPUTE),
        _nic("mlx5_2", 1, role=NicRole.COMPUTE),
        _nic("mlx5_3", 1, role=NicRole.COMPUTE),
        _nic("mlx5_4", 0, role=NicRole.FRONT_END, layer="Ethernet", route=True),
        _nic("mlx5_5", 1, role=NicRole.STORAGE, layer="Ethernet"),
    ]
    return Topology.build(gpus, links, nics, SystemFacts(nvswitch=True, gpudirect_rdma=True))


def without_numa(t: Topology) -> Topology:
    """The same tray as an imported matrix shows it: no NUMA nodes, only the NICs' distances."""
    gpus = [replace(g, numa_node=None) for g in t.gpus]
    nics = [replace(n, numa_node=None) for n in t.nics]
    return Topology.build(gpus, list(t.links.values()), nics, t.system)


def test_gb200_status_has_c2c_and_roles() -> None:
    status = to_status(gb200_tray())
    c2c = status.gpus[2].c2c
    assert c2c is not None
    assert (c2c.links, c2c.bandwidth_g_bps) == (10, 450.0)
    assert c2c.nics == ["mlx5_2", "mlx5_3", "mlx5_5"]
    assert [(n.name, n.role, n.default_route) for n in status.nics][3:] == [
        ("mlx5_3", NicRole.COMPUTE, False),
        ("mlx5_4", NicRole.FRONT_END, True),
        ("mlx5_5", NicRole.STORAGE, False),
    ]
    api = status.to_api()
    assert api["gpus"][0]["c2c"] == {"links": 10, "bandwidthGBps": 450.0, "nics": ["mlx5_0", "mlx5_1", "mlx5_4"]}
    assert api["nics"][4]["role"] == "FrontEnd" and api["nics"][4]["defaultRoute"] is True


@pytest.mark.parametrize(
    "topology",
    [gb200_tray(), without_numa(gb200_tray())],
    ids=["numa-known", "affinity-only"],
)
def test_own_grace_nics_by_numa_or_distance(topology: Topology) -> None:
    status = to_status(topology)
    assert [g.c2c.nics if g.c2c else None for g in status.gpus] == [
        ["mlx5_0", "mlx5_1", "mlx5_4"],
        ["mlx5_0", "mlx5_1", "mlx5_4"],
        ["mlx5_2", "mlx5_3", "mlx5_5"],
        ["mlx5_2", "mlx5_3", "mlx5_5"],
    ]


@pytest.mark.parametrize(
    "topology",
    [
        gb200_tray(),
        without_numa(gb200_tray()),
        Topology.build([Gpu(0, model="NVIDIA H200")], [], [Nic("mlx5_0", affinity=(K.PIX,))]),
    ],
    ids=["gb200-tray", "gb200-affinity-only", "no-c2c-no-role"],
)
def test_status_round_trip(topology: Topology) -> None:
    status = to_status(topology)
    assert from_status(status) == topology
    again = NodeTopologyStatus.model_validate(status.to_api())
    assert from_status(again) == topology


def test_no_c2c_and_no_role_stay_out_of_the_object() -> None:
    t = Topology.build([Gpu(0, model="NVIDIA H200")], [], [Nic("mlx5_0", affinity=(K.PIX,))])
    api = to_status(t).to_api()
    assert "c2c" not in api["gpus"][0]
    assert "role" not in api["nics"][0] and api["nics"][0]["defaultRoute"] is False
