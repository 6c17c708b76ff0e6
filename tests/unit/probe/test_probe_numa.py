"""A GPU's NUMA node is its CPU's (on Grace, its own Grace's), never a Grace GPU's own memory node: from sysfs,
else NVML's CPU affinity placed by sysfs's node CPU lists, else (no C2C) ``nvmlDeviceGetNumaNodeId``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest
from probe_builders import hgx, pairs_board

from gputopo.api.nodetopology import NicRole
from gputopo.topology.model import Topology
from gputopo.topology.nccl import NcclPath, nic_path
from gputopo_probe.discovery import discover
from gputopo_probe.discovery.numa import affinity_cpus
from gputopo_probe.discovery.sysfs import Sysfs, parse_cpulist
from gputopo_probe.fake.grace import gb200, gb300, gh200
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.nvml import Nvml
from gputopo_probe.probe import Probe

C, S, F = NicRole.COMPUTE, NicRole.STORAGE, NicRole.FRONT_END
_AFFINITY = ("nvmlDeviceGetCpuAffinityWithinScope", "nvmlDeviceGetCpuAffinity")
_TRAY_OWN_NICS = [["mlx5_0", "mlx5_1", "mlx5_4"]] * 2 + [["mlx5_2", "mlx5_3", "mlx5_5"]] * 2


def _set_gpu_sysfs_numa(node: FakeNode, values: list[int]) -> None:
    """What sysfs says of each GPU's PCI device: -1 (unknown) or a node number."""
    for device, value in zip(node.nvml.devices, values, strict=True):
        (node.sysfs_root / "bus" / "pci" / "devices" / device.pci.bdf / "numa_node").write_text(f"{value}\n")


def _memory_nodes(node: FakeNode) -> list[int]:
    return [node.nvml.nvmlDeviceGetNumaNodeId(d) for d in node.nvml.devices]


def _unknown(node: FakeNode) -> list[int]:
    return [-1] * len(node.nvml.devices)


def _found(node: FakeNode, lib: Any = None) -> Topology:
    return discover(Nvml(lib if lib is not None else node.nvml), node.reader()).topology


# -- Grace: the GPU's own Grace's node -----------------------------------------------------------------------


@pytest.mark.parametrize("sysfs_says", [_unknown, _memory_nodes], ids=["sysfs-unknown", "sysfs-gpu-memory-node"])
@pytest.mark.parametrize(
    ("topology", "numa", "own_nics", "roles"),
    [
        (gh200(), [0], [["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]], [C, C, C, C, F]),
        (gb200(), [0, 0, 1, 1], _TRAY_OWN_NICS, [C, C, C, C, F, S]),
        (gb300(), [0, 0, 1, 1], _TRAY_OWN_NICS, [C, C, C, C, F, F]),
    ],
    ids=["gh200", "gb200", "gb300"],
)
def test_grace_gpus_publish_their_graces_node(
    tmp_path: Path,
    topology: Topology,
    numa: list[int],
    own_nics: list[list[str]],
    roles: list[NicRole],
    sysfs_says: Callable[[FakeNode], list[int]],
) -> None:
    node = FakeNode("n", topology, sysfs_root=tmp_path / "sys")
    _set_gpu_sysfs_numa(node, sysfs_says(node))  # before the probe discovers the node
    probe = Probe(Nvml(node.nvml), node.reader(), xid_thread=False)
    try:
        status = probe.poll().status()
    finally:
        probe.close()
    assert [g.numa_node for g in status.gpus] == numa
    assert [g.c2c.nics if g.c2c else None for g in status.gpus] == own_nics
    assert [n.role for n in status.nics] == roles
    found = probe.inventory.topology
    assert [n.affinity for n in found.nics] == [n.affinity for n in topology.nics]
    for gpu, names in zip(found.gpus, own_nics, strict=True):
        paths = {n.name: nic_path(gpu, n) for n in found.nics}
        assert {name for name, p in paths.items() if p.path is NcclPath.P2C and p.gdr} == set(names)


@pytest.mark.parametrize(
    ("topology", "graces", "memory_nodes"),
    [(gh200(), 1, [1]), (gb200(), 2, [2, 10, 18, 26]), (gb300(), 2, [2, 10, 18, 26])],
    ids=["gh200", "gb200", "gb300"],
)
def test_fake_grace_gpus_are_numa_nodes_without_cpus(
    tmp_path: Path, topology: Topology, graces: int, memory_nodes: list[int]
) -> None:
    """As on a real Grace host: NVML's NUMA node id is the GPU memory's ("GPU NUMA ID"), a node without CPUs."""
    node = FakeNode("n", topology, sysfs_root=tmp_path / "sys")
    assert _memory_nodes(node) == memory_nodes
    cpus = node.reader().node_cpus()
    assert {n for n, own in cpus.items() if own} == set(range(graces))
    assert all(cpus[n] == frozenset() for n in memory_nodes)


# -- when NVML or sysfs cannot say ---------------------------------------------------------------------------


class _Binding:
    """An NVML binding older than some calls: they are not there at all."""

    def __init__(self, lib: Any, missing: tuple[str, ...]) -> None:
        self._lib, self._missing = lib, missing

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise AttributeError(name)
        return getattr(self._lib, name)


def _raise_unknown(*args: Any) -> Any:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


def _not_supported(node: FakeNode) -> Any:
    node.nvml.unsupported.update(_AFFINITY)
    return None


def _not_in_the_binding(node: FakeNode) -> Any:
    return _Binding(node.nvml, _AFFINITY)


def _unknown_error(node: FakeNode) -> Any:
    for call in _AFFINITY:
        setattr(node.nvml, call, _raise_unknown)
    return None


def _all_cpus(node: FakeNode) -> Any:
    """An affinity over both Graces: no one node holds it."""
    every = [cpu for d in node.nvml.devices for cpu in d.cpus]
    for d in node.nvml.devices:
        d.cpus = tuple(sorted(set(every)))
    return None


def _no_node_lists(node: FakeNode) -> Any:
    for cpulist in (node.sysfs_root / "devices" / "system" / "node").glob("node*/cpulist"):
        cpulist.unlink()
    return None


@pytest.mark.parametrize(
    "cannot_say",
    [_not_supported, _not_in_the_binding, _unknown_error, _all_cpus, _no_node_lists],
    ids=[
        "affinity-not-supported",
        "affinity-not-in-binding",
        "affinity-unknown-error",
        "affinity-spans-nodes",
        "no-node-cpu-lists",
    ],
)
def test_c2c_gpus_stay_unknown_rather_than_their_memory_node(
    tmp_path: Path, cannot_say: Callable[[FakeNode], Any]
) -> None:
    node = FakeNode("n", gb200(), sysfs_root=tmp_path / "sys")
    _set_gpu_sysfs_numa(node, _unknown(node))
    lib = cannot_say(node)
    found = _found(node, lib)
    assert [g.numa_node for g in found.gpus] == [None] * 4
    assert [(g.c2c_links, g.c2c_gbps) for g in found.gpus] == [(10, 450.0)] * 4
    assert [n.numa_node for n in found.nics] == [0, 0, 1, 1, 0, 1]


def test_the_older_affinity_call_is_enough(tmp_path: Path) -> None:
    node = FakeNode("n", gb200(), sysfs_root=tmp_path / "sys")
    _set_gpu_sysfs_numa(node, _unknown(node))
    found = _found(node, _Binding(node.nvml, ("nvmlDeviceGetCpuAffinityWithinScope",)))
    assert [g.numa_node for g in found.gpus] == [0, 0, 1, 1]


def test_a_memory_node_sysfs_names_is_kept_when_the_node_lists_are_unreadable(tmp_path: Path) -> None:
    """Nothing then says that node has no CPUs; the probe does not guess."""
    node = FakeNode("n", gh200(), sysfs_root=tmp_path / "sys")
    _set_gpu_sysfs_numa(node, [1])
    _no_node_lists(node)
    assert [g.numa_node for g in _found(node).gpus] == [1]


# -- x86: unchanged --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topology", [hgx(), pairs_board()], ids=["hgx-h100", "nvlink-bridge-pairs"])
def test_x86_gpus_keep_their_pci_devices_node(tmp_path: Path, topology: Topology) -> None:
    node = FakeNode("n", topology, sysfs_root=tmp_path / "sys")
    found = _found(node)
    assert [g.numa_node for g in found.gpus] == [g.numa_node for g in topology.gpus]
    assert [(n.numa_node, n.affinity) for n in found.nics] == [(n.numa_node, n.affinity) for n in topology.nics]


def _numa_node_id_of_the_pci_device(node: FakeNode) -> None:
    node.nvml.unsupported.update(_AFFINITY)
    node.nvml.nvmlDeviceGetNumaNodeId = lambda handle: handle.pci.numa_node  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("nvml_says", "numa"),
    [
        (lambda node: None, [0, 0, 0, 0, 1, 1, 1, 1]),
        (_numa_node_id_of_the_pci_device, [0, 0, 0, 0, 1, 1, 1, 1]),
        (_not_supported, [None] * 8),
    ],
    ids=["cpu-affinity", "numa-node-id", "neither"],
)
def test_an_x86_gpu_without_a_sysfs_node(
    tmp_path: Path, nvml_says: Callable[[FakeNode], None], numa: list[int | None]
) -> None:
    """Its CPU affinity's node, else NVML's NUMA node id (a GPU without C2C is no NUMA node of its own)."""
    node = FakeNode("n", hgx(), sysfs_root=tmp_path / "sys")
    _set_gpu_sysfs_numa(node, _unknown(node))
    nvml_says(node)
    assert [g.numa_node for g in _found(node).gpus] == numa


# -- readers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-71", set(range(72))), ("0-3,8-11\n", {0, 1, 2, 3, 8, 9, 10, 11}), ("5", {5}), ("", set()), ("\n", set())],
    ids=["range", "ranges", "one-cpu", "no-cpus", "newline-only"],
)
def test_parse_cpulist(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "-1", "0-"], ids=["letters", "backwards", "negative", "open"])
def test_parse_cpulist_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


def test_node_cpus(tmp_path: Path) -> None:
    base = tmp_path / "devices" / "system" / "node"
    for name, text in [("node0", "0-3"), ("node1", ""), ("node2", "garbled"), ("node10", "4,5")]:
        (base / name).mkdir(parents=True)
        (base / name / "cpulist").write_text(text + "\n")
    (base / "node3").mkdir()  # no cpulist
    (base / "has_cpu").write_text("0,10\n")
    (base / "nodeX").mkdir()
    assert Sysfs(tmp_path, None).node_cpus() == {0: {0, 1, 2, 3}, 1: frozenset(), 10: {4, 5}}
    assert Sysfs(tmp_path / "absent", None).node_cpus() == {}


@pytest.mark.parametrize(
    ("words", "cpus"),
    [([0xFF, 0], set(range(8))), ([0, 1 << 63, 1], {127, 128}), ([], set()), (None, set()), (["x"], set())],
    ids=["first-word", "across-words", "empty", "not-a-sequence", "not-integers"],
)
def test_affinity_cpus(words: Any, cpus: set[int]) -> None:
    assert affinity_cpus(words) == cpus
