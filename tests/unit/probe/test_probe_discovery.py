"""Discovery over the fake NVML and fake sysfs: what a real node's probe would find."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest
from probe_builders import K, hgx, pairs_board, pcie_only

from gputopo.api.nodetopology import NicState
from gputopo.topology.model import Topology
from gputopo_probe.discovery import discover
from gputopo_probe.errors import GpuLostError, NvmlError, NvmlNotSupportedError
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.nvml import P2P_CAPS_INDEX_READ, Nvml, translate


def _discover(topology: Topology, tmp_path: Path, **kwargs: object) -> tuple[Topology, FakeNode]:
    node = FakeNode("n", topology, sysfs_root=tmp_path / "sys", **kwargs)  # type: ignore[arg-type]
    return discover(Nvml(node.nvml), node.reader()).topology, node


def _link_view(t: Topology) -> dict[tuple[int, int], tuple[K, int]]:
    return {key: (link.kind, link.nvlinks) for key, link in t.links.items()}


@pytest.mark.parametrize(
    "topology",
    [hgx(), hgx(4, 12, "NVIDIA A100-SXM4-80GB", nics=False), pairs_board(), pcie_only()],
    ids=["hgx-h100", "hgx-a100-4", "nvlink-bridge-pairs", "pcie-only"],
)
def test_links_and_nics_come_back(topology: Topology, tmp_path: Path) -> None:
    found, _ = _discover(topology, tmp_path)
    assert _link_view(found) == _link_view(topology)
    assert [(n.name, n.link_layer, n.rate_gbps, n.affinity) for n in found.nics] == [
        (n.name, n.link_layer, n.rate_gbps, n.affinity) for n in topology.nics
    ]


def test_gpu_facts(tmp_path: Path) -> None:
    found, _ = _discover(hgx(), tmp_path)
    gpu = found.gpus[5]
    assert (gpu.model, gpu.architecture, gpu.nvlink_version) == ("NVIDIA H100 80GB HBM3", "Hopper", 4)
    assert gpu.pci_bus_id.startswith("0000:") and gpu.pci_bus_id == gpu.pci_bus_id.lower()
    assert gpu.numa_node == 1
    assert (gpu.pcie_generation, gpu.pcie_width) == (5, 16)
    assert found.system.nvswitch and found.system.gpudirect_rdma
    assert found.system.cuda_driver_version == "12.4"


def test_invisible_nvlink_far_end_is_an_nvswitch(tmp_path: Path) -> None:
    """In a VM the NVSwitches are hidden: empty remote bus id, no remote type; NCCL assumes NVSwitch."""
    found, _ = _discover(hgx(), tmp_path, hide_switches=True)
    assert {link.kind for link in found.links.values()} == {K.NVSWITCH}
    assert found.system.nvswitch


@pytest.mark.parametrize(
    ("call", "check"),
    [
        ("nvmlDeviceGetName", lambda t: t.gpus[0].model == ""),
        ("nvmlDeviceGetArchitecture", lambda t: t.gpus[0].architecture == ""),
        ("nvmlDeviceGetMaxPcieLinkGeneration", lambda t: t.gpus[0].pcie_generation == 0),
        ("nvmlDeviceGetNvLinkRemoteDeviceType", lambda t: t.links[(0, 1)].kind is K.NVSWITCH),
        ("nvmlSystemGetDriverVersion", lambda t: t.system.driver_version == ""),
    ],
    ids=["name", "architecture", "pcie-generation", "remote-type-falls-back-to-pci-class", "driver-version"],
)
def test_not_supported_degrades_one_field(call: str, check: object, tmp_path: Path) -> None:
    node = FakeNode("n", hgx(), sysfs_root=tmp_path / "sys")
    node.nvml.unsupported.add(call)
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert check(found)  # type: ignore[operator]
    assert found.gpu_count == 8 and len(found.nics) == 8


def test_pcie_level_not_supported_reads_as_sys(tmp_path: Path) -> None:
    node = FakeNode("n", pcie_only(), sysfs_root=tmp_path / "sys")
    node.nvml.unsupported.add("nvmlDeviceGetTopologyCommonAncestor")
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert {link.kind for link in found.links.values()} == {K.SYS}


def test_nic_state_and_link_layer_filter(tmp_path: Path) -> None:
    topology = pairs_board()
    node = FakeNode("n", topology, sysfs_root=tmp_path / "sys")
    node.sysfs.set_nic_up("mlx5_0", False)
    # an RDMA device that is no data NIC (AWS p6-b200 lists NVLink controllers here)
    odd = tmp_path / "sys" / "class" / "infiniband" / "ibp0" / "ports" / "1"
    odd.mkdir(parents=True)
    (odd / "link_layer").write_text("NVLink\n")
    found = discover(Nvml(node.nvml), node.reader()).topology
    assert [(n.name, n.state) for n in found.nics] == [("mlx5_0", NicState.DOWN)]


def test_no_gdr_module(tmp_path: Path) -> None:
    found, _ = _discover(pairs_board(), tmp_path)
    assert not found.system.gpudirect_rdma


def test_p2p_read_index_is_the_literal_zero() -> None:
    """pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,): the probe must not pass it on."""
    assert P2P_CAPS_INDEX_READ == 0
    assert isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple | int)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, NvmlNotSupportedError),
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, NvmlNotSupportedError),
        (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLostError),
        (pynvml.NVML_ERROR_RESET_REQUIRED, GpuLostError),
        (pynvml.NVML_ERROR_NO_PERMISSION, NvmlError),
    ],
    ids=["not-supported", "invalid-argument", "gpu-lost", "reset-required", "no-permission"],
)
def test_nvml_errors_are_translated(code: int, kind: type[NvmlError]) -> None:
    error = translate("nvmlDeviceGetUUID", pynvml.NVMLError(code))
    assert type(error) is kind
    assert error.code == code and "nvmlDeviceGetUUID" in str(error)


def test_a_lost_gpu_at_discovery_is_an_error(tmp_path: Path) -> None:
    node = FakeNode("n", pcie_only(), sysfs_root=tmp_path / "sys")
    node.nvml.lost.add(2)
    with pytest.raises(GpuLostError):
        discover(Nvml(node.nvml), node.reader())
