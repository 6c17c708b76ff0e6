"""NCCL's GPU-to-NIC paths and GPUDirect RDMA per NCCL version, several NICs per GPU, and compute rails only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputopo.api.nodetopology import LinkKind, NicRole
from gputopo.topology import Gpu, Link, Nic, SystemFacts, Topology, estimate_gang, nearest_nics, parse_nvidia_smi
from gputopo.topology.estimate import NET_EFFICIENCY
from gputopo.topology.nccl import NcclPath, NcclSettings, NcclVersion, nic_path
from gputopo.topology.rails import nic_assignment

GRACE_GPU = Gpu(0, model="NVIDIA GB200", numa_node=0, c2c_links=5)
PCIE_GPU = Gpu(0, model="NVIDIA H100 80GB HBM3", numa_node=0)


def _nic(distance: str, numa: int | None = None) -> Nic:
    return Nic("mlx5_0", rate_gbps=400.0, numa_node=numa, affinity=(LinkKind(distance),))


def _settings(version: str, **env: object) -> NcclSettings:
    return NcclSettings(NcclVersion.parse(version), **env)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gpu", "nic", "settings", "path", "gdr"),
    [
        # A NIC on the GPU's own Grace: C2C then PHB.
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.25.1"), NcclPath.PHB, False),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.25.1", net_gdr_level=NcclPath.SYS), NcclPath.PHB, True),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.26.2"), NcclPath.PHB, False),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.26.2", net_gdr_c2c=True), NcclPath.PHB, True),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.27.3"), NcclPath.P2C, True),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.27.3", net_gdr_c2c=False), NcclPath.P2C, False),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.29.2"), NcclPath.P2C, True),
        (GRACE_GPU, _nic("SYS", numa=0), _settings("2.29.2", net_gdr_level=NcclPath.PXB), NcclPath.P2C, False),
        (GRACE_GPU, _nic("NODE"), _settings("2.30.7"), NcclPath.P2C, True),  # NUMA unknown: NODE is its Grace
        # A NIC on the other Grace stays SYS: no GDR unless NCCL_NET_GDR_LEVEL=SYS.
        (GRACE_GPU, _nic("SYS", numa=1), _settings("2.27.3"), NcclPath.SYS, False),
        (GRACE_GPU, _nic("SYS", numa=1), _settings("2.30.7"), NcclPath.SYS, False),
        (GRACE_GPU, _nic("SYS", numa=1), _settings("2.30.7", net_gdr_level=NcclPath.SYS), NcclPath.SYS, True),
        # A NIC behind a PCIe switch with a Grace GPU keeps the PCIe rules.
        (GRACE_GPU, _nic("PXB", numa=0), _settings("2.25.1"), NcclPath.PXB, True),
        # GPUs on PCIe: GDR up to PXB in every version (2.29's P2C default admits the same NICs).
        (PCIE_GPU, _nic("PIX"), _settings("2.19.3"), NcclPath.PIX, True),
        (PCIE_GPU, _nic("PXB"), _settings("2.25.1"), NcclPath.PXB, True),
        (PCIE_GPU, _nic("PXB"), _settings("2.30.7"), NcclPath.PXB, True),
        (PCIE_GPU, _nic("PHB"), _settings("2.30.7"), NcclPath.PHB, False),
        (PCIE_GPU, _nic("NODE", numa=0), _settings("2.30.7"), NcclPath.PHB, False),
        (PCIE_GPU, _nic("SYS"), _settings("2.27.3"), NcclPath.SYS, False),
        (PCIE_GPU, _nic("NODE"), _settings("2.27.3", net_gdr_level=NcclPath.PHB), NcclPath.PHB, True),
    ],
    ids=[
        "grace-own-2.25-off",
        "grace-own-2.25-level-sys",
        "grace-own-2.26-default-off",
        "grace-own-2.26-gdr-c2c-on",
        "grace-own-2.27.3-on",
        "grace-own-2.27.3-gdr-c2c-off",
        "grace-own-2.29-on",
        "grace-own-2.29-level-pxb",
        "grace-node-numa-unknown",
        "grace-other-2.27.3",
        "grace-other-2.30",
        "grace-other-level-sys",
        "grace-pxb",
        "pcie-pix-2.19",
        "pcie-pxb-2.25",
        "pcie-pxb-2.30",
        "pcie-phb-2.30",
        "pcie-node-2.30",
        "pcie-sys-2.27",
        "pcie-node-level-phb",
    ],
)
def test_gdr_per_nccl_version(gpu: Gpu, nic: Nic, settings: NcclSettings, path: NcclPath, gdr: bool) -> None:
    found = nic_path(gpu, nic, settings)
    assert (found.path, found.gdr) == (path, gdr)


@pytest.mark.parametrize(
    ("text", "version"),
    [("2.27.3", NcclVersion(2, 27, 3)), ("v2.29.2-1", NcclVersion(2, 29, 2)), ("22703", NcclVersion(2, 27, 3))],
)
def test_nccl_version_parse(text: str, version: NcclVersion) -> None:
    assert NcclVersion.parse(text) == version


def _gh200(roles: tuple[NicRole | None, ...] = (None,) * 4, rate: float = 200.0) -> Topology:
    """One GH200 and two dual-port BlueField-3 (four ports), all NODE on its Grace, as nvidia-smi prints them."""
    gpu = Gpu(0, model="NVIDIA GH200 480GB", numa_node=0, c2c_links=10)
    nics = [
        Nic(f"mlx5_{j}", rate_gbps=rate, numa_node=0, affinity=(LinkKind.NODE,), role=role)
        for j, role in enumerate(roles)
    ]
    return Topology.build([gpu], [], nics, SystemFacts())


def test_gh200_with_four_equidistant_nics_uses_all_four() -> None:
    t = _gh200()
    total, picks = nic_assignment(t, [0])
    assert picks == {0: (0, 1, 2, 3)}
    assert total == pytest.approx(4 * 200 / 8 * NET_EFFICIENCY)
    assert [n.name for n in nearest_nics(t, [0])] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    two = estimate_gang([(t, [0])] * 2).busbw_gbps
    assert two == pytest.approx(4 * 25 * NET_EFFICIENCY)
    before = estimate_gang([(t, [0])] * 2, settings=_settings("2.25.1")).busbw_gbps
    assert before < two  # NVIDIA/nccl#1579: GDR off through C2C before 2.26


def test_only_compute_rails_carry_the_gang_and_go_to_nccl_ib_hca() -> None:
    t = _gh200((NicRole.COMPUTE, NicRole.STORAGE, NicRole.COMPUTE, NicRole.FRONT_END))
    total, picks = nic_assignment(t, [0])
    assert picks == {0: (0, 2)} and total == pytest.approx(2 * 200 / 8 * NET_EFFICIENCY)
    assert [n.name for n in nearest_nics(t, [0])] == ["mlx5_0", "mlx5_2"]


def test_a_faster_front_end_port_never_replaces_the_rails() -> None:
    t = _gh200((NicRole.COMPUTE, NicRole.FRONT_END, None, None))
    nics = list(t.nics)
    nics[1] = replace(nics[1], rate_gbps=800.0, default_route=True)
    t = Topology(t.gpus, t.links, tuple(nics), t.system)
    assert [n.name for n in nearest_nics(t, [0])] == ["mlx5_0", "mlx5_2", "mlx5_3"]


def _gb200_tray_text(nic_cells: str) -> str:
    rows = [
        "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        f"GPU0\t X \tNV18\tNV18\tNV18\t{nic_cells}\t0-71\t0\t\t2",
        f"GPU1\tNV18\t X \tNV18\tNV18\t{nic_cells}\t0-71\t0\t\t10",
        f"GPU2\tNV18\tNV18\t X \tNV18\t{nic_cells}\t72-143\t1\t\t18",
        f"GPU3\tNV18\tNV18\tNV18\t X \t{nic_cells}\t72-143\t1\t\t26",
    ]
    for j in range(4):
        rows.append(f"NIC{j}\t{nic_cells}\t" + "\t".join(" X " if j == k else "SYS" for k in range(4)))
    return "\n".join(rows) + "\n"


def test_grace_matrix_import_says_what_it_assumed() -> None:
    t = parse_nvidia_smi(_gb200_tray_text("SYS\tSYS\tSYS\tSYS"))
    assert all(g.c2c for g in t.gpus)
    assert [n.numa_node for n in t.nics] == [0, 0, 1, 1]
    assert t.system.assumptions == (
        "GPU0-3 reach their Grace CPU by NVLink-C2C (GPU NUMA IDs 2,10,18,26)",
        "GPU model not named: NVLink-C2C bandwidth taken as a Grace Blackwell GPU's",
        "every NIC is SYS to every GPU; taken as NIC0,NIC1 on the Grace of GPU0-1 (NUMA 0); NIC2,NIC3 on the "
        "Grace of GPU2-3 (NUMA 1)",
        "NIC roles not stated: all 4 NICs taken as compute rails",
    )
    assert [n.name for n in nearest_nics(t, [2])] == ["NIC2", "NIC3"]


@pytest.mark.parametrize(
    ("c2c", "gpu_model", "grace"),
    [(None, None, True), (False, None, False), (None, "NVIDIA H100 80GB HBM3", False), (True, "NVIDIA H100", True)],
    ids=["numa-ids", "stated-not", "model-not-grace", "stated"],
)
def test_grace_is_recognised_or_stated(c2c: bool | None, gpu_model: str | None, grace: bool) -> None:
    t = parse_nvidia_smi(_gb200_tray_text("SYS\tSYS\tSYS\tSYS"), gpu_model=gpu_model, c2c=c2c)
    assert all(g.c2c for g in t.gpus) == grace
    assert bool(t.system.assumptions) == grace


def test_a_matrix_stated_not_grace_keeps_the_pcie_rules() -> None:
    text = _gb200_tray_text("SYS\tSYS\tSYS\tSYS")
    plain = parse_nvidia_smi(text, c2c=False)
    assert plain.system.assumptions == () and not any(g.c2c for g in plain.gpus)
    grace = parse_nvidia_smi(text)
    # Every NIC SYS: host memory at SYS without Grace, GPUDirect RDMA through C2C with it.
    assert estimate_gang([(plain, range(4))] * 2, nic_rate_gbps=400).busbw_gbps == pytest.approx(4 * 47 * 0.6)
    assert estimate_gang([(grace, range(4))] * 2, nic_rate_gbps=400).busbw_gbps == pytest.approx(4 * 47)


@pytest.mark.parametrize(
    ("version", "bounced"), [("2.27.3", True), ("2.28.3", False)], ids=["pxn-c2c-off", "pxn-c2c-on"]
)
def test_pxn_over_c2c_from_2_28(version: str, bounced: bool) -> None:
    # NICs only on the first Grace: GPU2 reaches them through GPU0 over NVLink (PXN) once NCCL_PXN_C2C is on;
    # before, through host memory. GPU0's C2C is made narrow so that GPU2 must carry part of the traffic.
    gpus = [Gpu(i, model="NVIDIA GB200", numa_node=i // 2, c2c_links=5, c2c_gbps=30.0) for i in range(4)]
    links = [Link(a, b, LinkKind.NVSWITCH, 18) for a in range(4) for b in range(a + 1, 4)]
    nics = [Nic(f"mlx5_{j}", rate_gbps=400.0, numa_node=0, affinity=(LinkKind.SYS,) * 4) for j in range(2)]
    t = Topology.build(gpus, links, nics, SystemFacts(nvswitch=True))
    part = estimate_gang([(t, [0, 2])] * 2, settings=_settings(version))
    assert ("host memory" in part.bottleneck) == bounced
