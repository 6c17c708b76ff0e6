"""The nvidia-smi topo -m importer over every shared fixture, the variants real machines print, and errors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from topo_builders import fixture_names

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology import (
    NvidiaSmiParseError,
    Topology,
    TopologyError,
    interconnect_class,
    nearest_gpus,
    nvlink_domain_size,
    parse_nvidia_smi,
    parse_nvidia_smi_all,
    render_nvidia_smi,
)
from gputopo.topology.catalog import fixture_text
from gputopo.topology.nvidia_smi import cell_text

SHARED = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "topology" / "nvidia-smi"


def nv_all(n: int, links: int) -> list[list[int]]:
    return [[0 if a == b else links for b in range(n)] for a in range(n)]


def nv_pairs(n: int, links: int) -> list[list[int]]:
    return [[links if a != b and a // 2 == b // 2 else 0 for b in range(n)] for a in range(n)]


# The DGX-1 hybrid cube-mesh as printed (row GPU0: X NV1 NV1 NV2 NV2 SYS SYS SYS, …).
DGX1 = [
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
]


@dataclass(frozen=True)
class Expect:
    """What a person reading the matrix would say about it."""

    gpus: int
    nics: int
    nvlinks: list[list[int]]
    domain: int
    interconnect: str
    nic_names: tuple[str, ...] = ()
    pcie: str | None = None  # the one PCIe level every non-NVLink GPU pair shows, if there is one
    nic_nearest: dict[str, tuple[int, ...]] | None = None
    block: int = 0


EXPECTED: dict[str, Expect] = {
    "2xRTX3090-nvlink-bridge-NV4.txt": Expect(2, 0, nv_all(2, 4), 2, "nvlink-pairs"),
    "2xTITANRTX-nvlink-NV2-and-PHB.txt": Expect(2, 0, nv_all(2, 2), 2, "nvlink-pairs"),
    "8xH100-NVL-pcie-nvlink-bridge-pairs-nv12.txt": Expect(
        8, 2, nv_pairs(8, 12), 2, "nvlink-pairs", ("mlx5_0", "mlx5_1"), nic_nearest={"mlx5_0": (1,), "mlx5_1": (1,)}
    ),
    "8xRTX4090-pcie-dual-socket-all-sys.txt": Expect(
        8, 2, nv_all(8, 0), 1, "pcie", ("NIC0", "NIC1"), pcie="SYS", nic_nearest={"NIC0": (6,), "NIC1": (6,)}
    ),
    "alcf-polaris-4xA100-nv4-2xmlx5.txt": Expect(
        4, 2, nv_all(4, 4), 4, "nvlink-mesh", ("mlx5_0", "mlx5_1"), nic_nearest={"mlx5_0": (3,), "mlx5_1": (1,)}
    ),
    "aws-g6e.12xlarge-4xL40S-pcie-node.txt": Expect(4, 0, nv_all(4, 0), 1, "pcie", pcie="NODE"),
    "aws-p4d.24xlarge-8xA100-nv12.txt": Expect(8, 0, nv_all(8, 12), 8, "nvswitch"),
    "dell-c4140-4xV100-sxm2-nv2-mlx5.txt": Expect(
        4, 1, nv_all(4, 2), 4, "nvlink-mesh", ("mlx5_0",), nic_nearest={"mlx5_0": (0, 1, 2, 3)}
    ),
    "dgx-a100-8gpu-nv12-10xmlx5.txt": Expect(
        8,
        10,
        nv_all(8, 12),
        8,
        "nvswitch",
        tuple(f"mlx5_{i}" for i in range(10)),
        nic_nearest={"mlx5_0": (0, 1), "mlx5_3": (2, 3), "mlx5_7": (6, 7), "mlx5_9": tuple(range(8))},
    ),
    "dgx1-v100-8gpu-cubemesh-4xmlx5.txt": Expect(
        8,
        4,
        DGX1,
        4,
        "nvlink-mesh",
        ("mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"),
        pcie="SYS",
        nic_nearest={"mlx5_0": (0, 1), "mlx5_2": (4, 5), "mlx5_1": (2, 3), "mlx5_3": (6, 7)},
    ),
    "hgx-a100-8gpu-nv12-8xmlx5-roce.txt": Expect(
        8, 8, nv_all(8, 12), 8, "nvswitch", tuple(f"mlx5_{i}" for i in range(8)), nic_nearest={"mlx5_5": (4, 5)}
    ),
    "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt": Expect(
        8,
        8,
        nv_all(8, 18),
        8,
        "nvswitch",
        tuple(f"mlx5_{i}" for i in range(8)),
        nic_nearest={f"mlx5_{i}": (i,) for i in range(8)},
    ),
    # NVLink not detected in this VM boot: read as printed, two GPUs over SYS.
    "azure-nc80adis-h100-v5-2gpu-nvlink-missing.txt": Expect(
        2, 1, nv_all(2, 0), 1, "pcie", ("NIC0",), pcie="SYS", nic_nearest={"NIC0": (0,)}
    ),
    "gb200-aws-4gpu-gpu-only-numa-0-1.txt": Expect(4, 0, nv_all(4, 18), 4, "nvswitch"),
}

# Posted matrices cut short: refused, with the line and what is missing.
REFUSED: dict[str, tuple[int, str]] = {
    "b200-8gpu-gpu2-nvlink-lost-12nic-PARTIAL.txt": (
        3,
        "nvidia-smi topo -m output is cut short: the matrix starts at the GPU0 row, with no header line naming "
        "its columns",
    ),
    "gb200-tray-4gpu-6nic-all-sys-PARTIAL.txt": (
        8,
        "nvidia-smi topo -m output is cut short: the GPU3 row has 5 of 10 device columns",
    ),
}


def test_every_fixture_has_expectations() -> None:
    assert sorted([*EXPECTED, *REFUSED]) == fixture_names()


@pytest.mark.parametrize("name", sorted(REFUSED), ids=lambda n: n.removesuffix(".txt"))
def test_cut_short_fixture_is_refused_in_one_line(name: str) -> None:
    line, reason = REFUSED[name]
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi_all(fixture_text(name))
    assert caught.value.line == line and caught.value.reason == reason
    assert "\n" not in str(caught.value)


def test_azure_pair_without_nvlink_reads_as_printed() -> None:
    t = parse_nvidia_smi(fixture_text("azure-nc80adis-h100-v5-2gpu-nvlink-missing.txt"), gpu_model="NVIDIA H100 NVL")
    assert t.link(0, 1).kind is LinkKind.SYS and t.nvlinks(0, 1) == 0
    assert [g.numa_node for g in t.gpus] == [0, 1] and t.nics[0].numa_node == 0
    assert not any(g.c2c for g in t.gpus) and t.system.assumptions == ()


def test_gb200_aws_tray_is_a_grace_tray() -> None:
    # One space between GPU0 and GPU1 in the header: columns are read by token, never by width.
    t = parse_nvidia_smi(fixture_text("gb200-aws-4gpu-gpu-only-numa-0-1.txt"))
    assert all(g.c2c for g in t.gpus) and [g.numa_node for g in t.gpus] == [0, 0, 1, 1]
    assert t.system.nvswitch and not t.nics
    assert t.system.assumptions[0] == "GPU0-3 reach their Grace CPU by NVLink-C2C (GPU NUMA IDs 2,10,18,26)"


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/ is not beside the repository")
def test_package_fixtures_are_the_shared_ones() -> None:
    shared = sorted(p.name for p in SHARED.glob("*.txt"))
    assert shared == fixture_names(), "copy every shared fixture into operator/gputopo/topology/fixtures"
    for name in shared:
        assert fixture_text(name) == (SHARED / name).read_text(encoding="utf-8"), name


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".txt"))
def test_fixture(name: str) -> None:
    expect = EXPECTED[name]
    topology = parse_nvidia_smi_all(fixture_text(name))[expect.block]
    assert topology.gpu_count == expect.gpus
    assert len(topology.nics) == expect.nics
    assert [list(row) for row in topology.nvlink_matrix] == expect.nvlinks
    assert nvlink_domain_size(topology) == expect.domain
    assert interconnect_class(topology) == expect.interconnect
    assert topology.system.nvswitch == (expect.interconnect == "nvswitch")
    if expect.nic_names:
        assert tuple(n.name for n in topology.nics) == expect.nic_names
    for link in topology.links.values():
        assert link.state is LinkState.UP, f"no fixture shows a degraded link: {link}"
        if expect.pcie and not link.is_nvlink:
            assert link.kind is LinkKind(expect.pcie)
    for nic_name, gpus in (expect.nic_nearest or {}).items():
        nic = next(n for n in topology.nics if n.name == nic_name)
        assert nearest_gpus(topology, nic) == gpus


def test_titan_rtx_file_holds_two_matrices() -> None:
    with_bridge, without = parse_nvidia_smi_all(fixture_text("2xTITANRTX-nvlink-NV2-and-PHB.txt"))
    assert with_bridge.nvlinks(0, 1) == 2
    assert without.link(0, 1).kind is LinkKind.PHB
    assert interconnect_class(without) == "pcie"
    assert parse_nvidia_smi(fixture_text("2xTITANRTX-nvlink-NV2-and-PHB.txt")).nvlinks(0, 1) == 2


def test_numa_affinity_and_nic_numa() -> None:
    t = parse_nvidia_smi(fixture_text("dgx-a100-8gpu-nv12-10xmlx5.txt"))
    assert [g.numa_node for g in t.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.nics[0].numa_node == 3 and t.nics[8].numa_node is None  # storage NICs are SYS to every GPU
    polaris = parse_nvidia_smi(fixture_text("alcf-polaris-4xA100-nv4-2xmlx5.txt"))
    assert [g.numa_node for g in polaris.gpus] == [3, 2, 1, 0]
    titan = parse_nvidia_smi(fixture_text("2xTITANRTX-nvlink-NV2-and-PHB.txt"))
    assert [g.numa_node for g in titan.gpus] == [None, None]


def test_gpu_model_sets_model_and_nvlink_version() -> None:
    t = parse_nvidia_smi(fixture_text("hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt"), gpu_model="NVIDIA H100 80GB HBM3")
    assert {g.model for g in t.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.nvlink_version for g in t.gpus} == {4}
    assert {g.architecture for g in t.gpus} == {"Hopper"}


# -- variants real machines print -------------------------------------------------------------------------------


def _body(name: str) -> str:
    """A fixture without its provenance lines (what nvidia-smi printed)."""
    return "\n".join(line for line in fixture_text(name).splitlines() if not line.startswith("# "))


def _same(a: Topology, b: Topology) -> None:
    assert a.gpu_count == b.gpu_count
    assert {k: (v.kind, v.nvlinks, v.state) for k, v in a.links.items()} == {
        k: (v.kind, v.nvlinks, v.state) for k, v in b.links.items()
    }
    assert [(n.name, n.affinity) for n in a.nics] == [(n.name, n.affinity) for n in b.nics]


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".txt"))
def test_tabs_and_runs_of_spaces_read_alike(name: str) -> None:
    text = fixture_text(name)
    spaced = text.replace("\t", "   ")
    tabbed = re.sub(r"(?m)(?<=\S) {2,}(?=\S)", "\t", text)
    _same(parse_nvidia_smi(text), parse_nvidia_smi(spaced))
    _same(parse_nvidia_smi(text), parse_nvidia_smi(tabbed))


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".txt"))
def test_without_legend(name: str) -> None:
    text = fixture_text(name)
    cut = text.split("\nLegend:")[0] + "\n"
    stripped = parse_nvidia_smi(cut)
    full = parse_nvidia_smi(text)
    assert stripped.gpu_count == full.gpu_count
    assert [list(r) for r in stripped.nvlink_matrix] == [list(r) for r in full.nvlink_matrix]
    # Without the NIC Legend the NICs keep their column names.
    assert len(stripped.nics) == len(full.nics)


@pytest.mark.parametrize(
    "prompt",
    [
        "$ nvidia-smi topo -m",
        "[root@node ~]# nvidia-smi topo -m",
        "user@dgx:~$ nvidia-smi topo -m",
        "# nvidia-smi topo -m",
    ],
)
def test_prompt_lines(prompt: str) -> None:
    body = _body("hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt")
    _same(parse_nvidia_smi(f"{prompt}\n{body}\n{prompt.split()[0]} \n"), parse_nvidia_smi(body))


OLD_K80 = """\
$ nvidia-smi topo -m
        GPU0    GPU1    GPU2    GPU3    mlx4_0  CPU Affinity
GPU0     X      PIX     SOC     SOC     SOC     0-11
GPU1    PIX      X      SOC     SOC     SOC     0-11
GPU2    SOC     SOC      X      PIX     PHB     12-23
GPU3    SOC     SOC     PIX      X      PHB     12-23
mlx4_0  SOC     SOC     PHB     PHB      X

Legend:

  X   = Self
  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing a single PCIe switch
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_old_legend_with_soc() -> None:
    t = parse_nvidia_smi(OLD_K80)
    assert t.link(0, 1).kind is LinkKind.PIX
    assert t.link(0, 2).kind is LinkKind.SYS
    assert t.nics[0].name == "mlx4_0"
    assert t.nics[0].affinity == (LinkKind.SYS, LinkKind.SYS, LinkKind.PHB, LinkKind.PHB)
    assert interconnect_class(t) == "pcie"


def test_na_cells_are_sys() -> None:
    text = """\
\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tN/A\tNV4\tN/A\tN/A\tN/A\t\tN/A
GPU1\tN/A\t X \tPHB\tPIX\t0-15\t0\t\tN/A
GPU2\tNV4\tPHB\t X \tN/A\t0-15\t0\t\tN/A
NIC0\tN/A\tPIX\tN/A\t X
"""
    t = parse_nvidia_smi(text)
    assert t.link(0, 1).kind is LinkKind.SYS
    assert t.nvlinks(0, 2) == 4
    assert t.nics[0].affinity == (LinkKind.SYS, LinkKind.PIX, LinkKind.SYS)
    assert [g.numa_node for g in t.gpus] == [None, 0, 0]


P2P = """
$ nvidia-smi topo -p2p r
 \tGPU0\tGPU1\tGPU2\tGPU3\t
 GPU0\tX\tOK\tOK\tOK\t
 GPU1\tOK\tX\tOK\tOK\t
 GPU2\tOK\tOK\tX\tCNS\t
 GPU3\tOK\tOK\tCNS\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


def test_trailing_and_leading_p2p_section() -> None:
    body = _body("alcf-polaris-4xA100-nv4-2xmlx5.txt")
    reference = parse_nvidia_smi(body)
    _same(parse_nvidia_smi(body + P2P), reference)
    _same(parse_nvidia_smi(P2P + "\n$ nvidia-smi topo -m\n" + body), reference)
    assert len(parse_nvidia_smi_all(body + P2P)) == 1


def test_nic_legend_names_the_nics() -> None:
    t = parse_nvidia_smi(_body("hgx-a100-8gpu-nv12-8xmlx5-roce.txt"))
    assert [n.name for n in t.nics] == [f"mlx5_{i}" for i in range(8)]


def test_gpu_numa_id_column_with_empty_cells() -> None:
    t = parse_nvidia_smi(fixture_text("2xRTX3090-nvlink-bridge-NV4.txt"))
    assert [g.numa_node for g in t.gpus] == [0, 0]


def _matrix(n: int, cell: object, nics: int = 0) -> str:
    """A synthetic matrix of n GPUs: cell(a, b) is what row a prints in column b."""
    header = "\t" + "\t".join([f"GPU{i}" for i in range(n)] + [f"NIC{j}" for j in range(nics)])
    header += "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [header]
    for a in range(n):
        cells = [" X " if a == b else cell(a, b) for b in range(n)]  # type: ignore[operator]
        cells += ["PIX" if a == j else "SYS" for j in range(nics)]
        rows.append(f"GPU{a}\t" + "\t".join(cells) + f"\t0-{n * 4 - 1}\t{a * 2 // n}\t\tN/A")
    for j in range(nics):
        cells = ["PIX" if a == j else "SYS" for a in range(n)] + [" X " if j == k else "SYS" for k in range(nics)]
        rows.append(f"NIC{j}\t" + "\t".join(cells))
    rows += ["", "NIC Legend:", ""] + [f"  NIC{j}: mlx5_{j}" for j in range(nics)]
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("n", range(1, 17))
def test_gpu_counts_1_to_16(n: int) -> None:
    switched = parse_nvidia_smi(_matrix(n, lambda a, b: "NV18", nics=min(n, 4)))
    assert switched.gpu_count == n
    assert len(switched.nics) == min(n, 4)
    assert nvlink_domain_size(switched) == n
    # Two GPUs with 18 links each cannot be told from a direct 18-link pair; from three on it is NVSwitch.
    assert interconnect_class(switched) == ("pcie" if n == 1 else "nvswitch" if n >= 3 else "nvlink-pairs")
    pcie = parse_nvidia_smi(_matrix(n, lambda a, b: "NODE" if a // 8 == b // 8 else "SYS"))
    assert pcie.gpu_count == n and interconnect_class(pcie) == "pcie" and nvlink_domain_size(pcie) == 1


def test_single_gpu_matrix() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
    t = parse_nvidia_smi(text)
    assert t.gpu_count == 1 and not t.links and nvlink_domain_size(t) == 1


def test_nv_counts_differ_pair_by_pair() -> None:
    t = parse_nvidia_smi(fixture_text("dgx1-v100-8gpu-cubemesh-4xmlx5.txt"))
    assert t.nvlinks(0, 1) == 1 and t.nvlinks(0, 3) == 2
    assert all(link.state is LinkState.UP for link in t.links.values())


def test_a_twin_with_fewer_links_is_degraded() -> None:
    # GPU1's row shows 10 links to GPU0, GPU0's row 12: the link lost two.
    def cell(a: int, b: int) -> str:
        if {a, b} == {0, 1}:
            return "NV10" if a == 1 else "NV12"
        return "NV12" if a // 2 == b // 2 else "NODE"

    t = parse_nvidia_smi(_matrix(4, cell))
    assert t.link(0, 1).state is LinkState.DEGRADED and t.nvlinks(0, 1) == 10
    assert t.link(2, 3).state is LinkState.UP and t.nvlinks(2, 3) == 12


def test_an_nvlink_seen_from_one_side_only_is_degraded() -> None:
    t = parse_nvidia_smi(_matrix(2, lambda a, b: "NV4" if a == 0 else "PHB"))
    assert t.link(0, 1).kind is LinkKind.NVLINK and t.link(0, 1).state is LinkState.DEGRADED


def test_nvswitch_gpu_with_fewer_links_is_degraded() -> None:
    t = parse_nvidia_smi(_matrix(8, lambda a, b: "NV17" if 3 in (a, b) else "NV18"))
    assert t.system.nvswitch
    assert {t.link(3, b).state for b in range(8) if b != 3} == {LinkState.DEGRADED}
    assert t.link(0, 1).state is LinkState.UP


def test_direct_mesh_pair_below_the_rest_is_degraded() -> None:
    t = parse_nvidia_smi(_matrix(4, lambda a, b: "NV3" if {a, b} == {0, 1} else "NV4"))
    assert not t.system.nvswitch
    assert t.link(0, 1).state is LinkState.DEGRADED
    assert t.link(0, 2).state is LinkState.UP


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".txt"))
def test_render_reads_back(name: str) -> None:
    t = parse_nvidia_smi_all(fixture_text(name))[EXPECTED[name].block]
    again = parse_nvidia_smi(render_nvidia_smi(t))
    _same(again, t)
    assert [[cell_text(again, a, b) for b in range(t.gpu_count)] for a in range(t.gpu_count)] == [
        [cell_text(t, a, b) for b in range(t.gpu_count)] for a in range(t.gpu_count)
    ]


# -- malformed input ----------------------------------------------------------------------------------------------


def _lines(name: str) -> list[str]:
    return fixture_text(name).splitlines()


def test_truncated_after_a_row_names_the_line() -> None:
    lines = _lines("dgx-a100-8gpu-nv12-10xmlx5.txt")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    cut = lines[: header + 6]  # header and GPU0-GPU4
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi("\n".join(cut) + "\n")
    assert caught.value.line == header + 6  # the last line; the row for GPU5 never came
    assert "GPU5" in str(caught.value) and caught.value.token == ""
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi("\n".join([*cut, "", "Legend:"]) + "\n")
    assert caught.value.line == header + 7 and "GPU5" in str(caught.value)


def test_truncated_inside_a_row_names_the_line_and_token() -> None:
    lines = _lines("hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    cut = [*lines[: header + 3], "GPU2    NV18    NV18     X      NV18"]
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi("\n".join(cut))
    assert caught.value.line == header + 4 and caught.value.token == "NV18"


@pytest.mark.parametrize(
    ("row", "token"),
    [
        ("GPU1\tNV4\t X \tNV4\tBOGUS\tSYS\tPHB\t16-23,48-55\t2", "BOGUS"),
        ("GPU1\tNV4\tNV4\tNV4\tNV4\tSYS\tPHB\t16-23,48-55\t2", "NV4"),  # no X on its own column
        ("GPU1\tNV0\t X \tNV4\tNV4\tSYS\tPHB\t16-23,48-55\t2", "NV0"),
        ("GPU1\tNV4\t X \tNV4\tNV4\tNV2\tPHB\t16-23,48-55\t2", "NV2"),  # NVLink to a NIC
        ("GPU1\tNV4\t X \tNV4\tNV4\tSYS\tPHB\t16-23,48-55\t2\textra", "extra"),
        ("GPU1\tNV4\t X \tNV4\tNV4\tSYS\tPHB\tcpus\t2", "cpus"),
        ("GPU7\tNV4\t X \tNV4\tNV4\tSYS\tPHB\t16-23,48-55\t2", "GPU7"),
        ("GPU0\tNV4\t X \tNV4\tNV4\tSYS\tPHB\t16-23,48-55\t2", "GPU0"),  # GPU0 twice
    ],
)
def test_malformed_row(row: str, token: str) -> None:
    lines = _lines("alcf-polaris-4xA100-nv4-2xmlx5.txt")
    at = next(i for i, line in enumerate(lines) if line.startswith("GPU1\t"))
    lines[at] = row
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi("\n".join(lines))
    assert caught.value.line == at + 1
    assert caught.value.token == token
    assert f"line {at + 1}" in str(caught.value) and repr(token) in str(caught.value)


def test_header_out_of_order() -> None:
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi("\tGPU0\tGPU2\nGPU0\t X \tSYS\nGPU2\tSYS\t X \n")
    assert caught.value.line == 1 and caught.value.token == "GPU2"


@pytest.mark.parametrize("text", ["", "\n\n", "nvidia-smi: command not found\n", "Legend:\n  X = Self\n"])
def test_no_matrix(text: str) -> None:
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_nvidia_smi(text)
    assert caught.value.line == 1
    assert isinstance(caught.value, TopologyError)
