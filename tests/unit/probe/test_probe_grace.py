"""Grace nodes through the fake NVML and sysfs: each GPU's NVLink-C2C and its own Grace's NICs, NIC roles from
link layer, default route and NUMA node, and what the probe publishes when NVML or sysfs cannot say."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ProbeFactory

from gputopo.api.nodetopology import NicRole
from gputopo.topology.model import Topology
from gputopo_probe.discovery import discover
from gputopo_probe.discovery.c2c import C2c, read_c2c
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.fake.grace import gb200, gb300, gh200
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.fake.nvml import C2C_FIELDS
from gputopo_probe.nvml import Nvml
from gputopo_probe.roles import NicRoleRules

C, S, F = NicRole.COMPUTE, NicRole.STORAGE, NicRole.FRONT_END


@pytest.mark.parametrize(
    ("topology", "c2c", "own_nics", "roles", "default_route"),
    [
        (gh200(), (10, 900.0), [["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]], [C, C, C, C, F], "mlx5_4"),
        (
            gb200(),
            (10, 450.0),
            [["mlx5_0", "mlx5_1", "mlx5_4"]] * 2 + [["mlx5_2", "mlx5_3", "mlx5_5"]] * 2,
            [C, C, C, C, F, S],
            "mlx5_4",
        ),
        (
            gb300(),
            (5, 223.56),
            [["mlx5_0", "mlx5_1", "mlx5_4"]] * 2 + [["mlx5_2", "mlx5_3", "mlx5_5"]] * 2,
            [C, C, C, C, F, F],
            "mlx5_4",
        ),
    ],
    ids=["gh200", "gb200", "gb300"],
)
def test_published_c2c_and_roles(
    fake_probe: ProbeFactory,
    topology: Topology,
    c2c: tuple[int, float],
    own_nics: list[list[str]],
    roles: list[NicRole],
    default_route: str,
) -> None:
    probe, _, _ = fake_probe(topology)
    status = probe.poll().status()
    assert [(g.c2c.links, g.c2c.bandwidth_g_bps) if g.c2c else None for g in status.gpus] == [c2c] * len(own_nics)
    assert [g.c2c.nics if g.c2c else None for g in status.gpus] == own_nics
    assert [n.role for n in status.nics] == roles
    assert [n.name for n in status.nics if n.default_route] == [default_route]
    found = probe.inventory.topology
    assert [(n.role, n.default_route, n.rate_gbps, n.numa_node) for n in found.nics] == [
        (n.role, n.default_route, n.rate_gbps, n.numa_node) for n in topology.nics
    ]


def test_gb300_rails_are_connectx8_at_800(fake_probe: ProbeFactory) -> None:
    probe, _, _ = fake_probe(gb300())
    status = probe.poll().status()
    assert [n.rate_gbps for n in status.nics if n.role is C] == [800.0] * 4


@pytest.mark.parametrize(
    "unsupported",
    [{"nvmlDeviceGetC2cModeInfoV", C2C_FIELDS}, {C2C_FIELDS}],
    ids=["mode-and-fields-not-supported", "fields-not-supported"],
)
def test_c2c_not_supported_reads_as_none(fake_probe: ProbeFactory, unsupported: set[str]) -> None:
    _, node, _ = fake_probe(gb200())
    node.nvml.unsupported.update(unsupported)
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert [(g.c2c_links, g.c2c_gbps) for g in found.gpus] == [(0, 0.0)] * 4
    assert len(found.nics) == 6


def test_a_driver_without_the_mode_call_still_reads_the_fields(fake_probe: ProbeFactory) -> None:
    _, node, _ = fake_probe(gh200())
    node.nvml.unsupported.add("nvmlDeviceGetC2cModeInfoV")
    assert read_c2c(Nvml(node.nvml), node.nvml.devices[0]) == C2c(10, 900.0)


def test_a_pcie_gpu_has_no_c2c(tmp_path: Path) -> None:
    from probe_builders import hgx

    node = FakeNode("n", hgx(), sysfs_root=tmp_path / "sys")
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert {(g.c2c_links, g.c2c_gbps) for g in found.gpus} == {(0, 0.0)}


def _node(tmp_path: Path, topology: Topology) -> FakeNode:
    return FakeNode("n", topology, sysfs_root=tmp_path / "sys")


def test_no_route_table_leaves_the_default_route_unknown(tmp_path: Path) -> None:
    """Without /proc the front-end port is told by what is left: an Ethernet port on an InfiniBand node."""
    node = _node(tmp_path, gb200())
    (node.sysfs.proc_root / "1" / "net" / "route").unlink()
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert [n.role for n in found.nics] == [C, C, C, C, S, S]
    assert not any(n.default_route for n in found.nics)


def test_missing_link_layer_and_numa_files(tmp_path: Path) -> None:
    node = _node(tmp_path, gb200())
    ports = tmp_path / "sys" / "class" / "infiniband"
    (ports / "mlx5_5" / "ports" / "1" / "link_layer").unlink()
    for name in ("mlx5_0", "mlx5_5"):
        (ports / name / "device" / "numa_node").unlink()
    found = discover(Nvml(node.nvml), node.reader()).topology
    by_name = {n.name: n for n in found.nics}
    assert (by_name["mlx5_5"].link_layer, by_name["mlx5_5"].role) == ("", None)
    assert (by_name["mlx5_0"].numa_node, by_name["mlx5_0"].role) == (None, C)
    assert by_name["mlx5_4"].role is F


def test_a_missing_device_id_is_no_bluefield(tmp_path: Path) -> None:
    node = _node(tmp_path, gb300())
    (tmp_path / "sys" / "class" / "infiniband" / "mlx5_5" / "device" / "device").unlink()
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert found.nics[5].role is S


def test_settings_name_roles(tmp_path: Path) -> None:
    node = _node(tmp_path, gb200())
    rules = NicRoleRules.parse(compute="mlx5_5", storage="mlx5_[23]")
    found = discover(Nvml(node.nvml), node.reader(), rules).topology
    assert [n.role for n in found.nics] == [C, C, S, S, F, C]


def test_a_default_route_through_a_bond_marks_its_slave(tmp_path: Path) -> None:
    """The route names the bond; the NIC's own network device is a slave of it (``master``)."""
    node = _node(tmp_path, gb200())
    net = tmp_path / "sys" / "class" / "net"
    (net / "bond0").mkdir()
    (net / "en-mlx5_5" / "master").symlink_to(net / "bond0")
    route = node.sysfs.proc_root / "1" / "net" / "route"
    route.write_text(route.read_text().replace("en-mlx5_4", "bond0"))
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert [n.name for n in found.nics if n.default_route] == ["mlx5_5"]
    assert [n.role for n in found.nics][4:] == [S, F]


def test_no_proc_root_reads_no_route(tmp_path: Path) -> None:
    node = _node(tmp_path, gh200())
    assert Sysfs(node.sysfs_root, None).default_route_devices() is None
    assert node.reader().default_route_devices() == {"en-mlx5_4"}
