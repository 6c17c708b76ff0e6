"""Link bandwidth facts: NVLink generations, the NVLink of each GPU model, PCIe generations.

Every figure is GB/s in one direction (what a ring hop uses), from ``shared/reference/gpu-topology-facts.md``
§2 unless noted. NVLink figures there are bidirectional per link; they are halved here.

NVSwitch semantics: on an NVSwitch baseboard every GPU pair reaches the other through the switches with
the GPU's *whole* NVLink bandwidth (links * per-link), but that bandwidth is shared by all of the GPU's
peers; ``nvidia-smi topo -m`` prints the per-GPU link total for every pair (NV6 on DGX-2, NV12 on A100,
NV18 on H100/H200/B200). With direct links (DGX-1, 4-GPU HGX, Polaris, PCIe bridges) the matrix shows the
links of that pair only, and those add up to the GPU's total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Gpu

__all__ = [
    "DEFAULT_PCIE_GENERATION",
    "MAX_NVLINKS_PER_GPU",
    "NVLINK_GENERATIONS",
    "PCIE_X16_GBPS",
    "UNKNOWN_NVLINK",
    "GpuSpec",
    "NvlinkGeneration",
    "c2c_gbps",
    "gpu_spec",
    "link_bandwidth_gbps",
    "nvlink_generation",
    "pcie_generation",
    "pcie_x16_gbps",
]


@dataclass(frozen=True, slots=True)
class NvlinkGeneration:
    """One NVLink generation (or variant): GB/s per link and direction, and whether NVLink SHARP exists."""

    name: str
    version: int
    per_link_gbps: float
    nvls: bool = False


NVLINK_GENERATIONS: dict[str, NvlinkGeneration] = {
    # P100: 4 links * 40 GB/s bidirectional (20/dir), 160 GB/s per GPU.
    "nvlink1": NvlinkGeneration("NVLink1", 1, 20.0),
    # V100: 6 links * 50 GB/s (25/dir), 300 GB/s per GPU; nvidia-smi reports 25.781 GB/s per link.
    # Turing TU102/TU104 bridges (TITAN RTX, RTX 2080 Ti, Quadro RTX) use the same 25 GB/s links.
    "nvlink2": NvlinkGeneration("NVLink2", 2, 25.0),
    # A100: 12 links * 50 GB/s (4 pairs * 50 Gbit/s), 600 GB/s per GPU.
    "nvlink3": NvlinkGeneration("NVLink3", 3, 25.0),
    # GA102 bridges (RTX 3090, RTX A6000, A40): 4 links * 14.0625 GB/s per direction, 112.5 GB/s per GPU.
    "nvlink3-ga102": NvlinkGeneration("NVLink3 (GA102 bridge)", 3, 14.0625),
    # H100/H200 SXM: 18 links * 50 GB/s, 900 GB/s per GPU; nvidia-smi shows 26.562 GB/s per link.
    "nvlink4": NvlinkGeneration("NVLink4", 4, 25.0, nvls=True),
    # B200/GB200: 18 links * 100 GB/s, 1.8 TB/s per GPU.
    "nvlink5": NvlinkGeneration("NVLink5", 5, 50.0, nvls=True),
}

# When neither the GPU model nor its NVLink version is known: the most common per-link figure.
UNKNOWN_NVLINK = NvlinkGeneration("NVLink (generation unknown)", 0, 25.0)

# The most NVLinks any GPU has (NVLink4/5: 18). More per-GPU links than this in one row of the matrix
# can only be NVSwitch semantics (every pair shows the GPU's total).
MAX_NVLINKS_PER_GPU = 18

_BY_VERSION = {g.version: g for key, g in NVLINK_GENERATIONS.items() if key != "nvlink3-ga102"}

# PCIe x16 bandwidth per direction after line encoding (8b/10b to Gen2, 128b/130b Gen3-5, FLIT Gen6).
PCIE_X16_GBPS: dict[int, float] = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
DEFAULT_PCIE_GENERATION = 4


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What a GPU model brings: its architecture, NVLink generation and link count, PCIe generation."""

    pattern: str
    architecture: str
    nvlink: NvlinkGeneration | None
    nvlinks: int
    pcie_generation: int
    # NVLink-C2C to the GPU's own Grace CPU (0 on a GPU reached over PCIe): links, and GB/s per direction as
    # NCCL counts it (``bw * count / 1000`` of its topology XML).
    c2c_links: int = 0
    c2c_gbps: float = 0.0


def _spec(
    pattern: str, arch: str, nvlink: str | None, links: int, pcie: int, c2c: tuple[int, float] = (0, 0.0)
) -> GpuSpec:
    return GpuSpec(pattern, arch, NVLINK_GENERATIONS[nvlink] if nvlink else None, links, pcie, *c2c)


# GB300: NCCL's topology XML of a GB300 tray shows ``<c2c bw="44712" count="5"/>``, 224 GB/s. GB200 is taken
# as the same *[inferred]*. GH200: NVLink-C2C at 900 GB/s both ways, 450 per direction (NVIDIA's figure);
# its link count is not published and 10 links of 45 GB/s is assumed *[inferred]*.
_GB_C2C = (5, 223.6)
_GH200_C2C = (10, 450.0)


# First match wins, so the more specific names come first. Patterns are matched against the upper-cased
# product name (``nvmlDeviceGetName``, e.g. "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB").
GPU_SPECS: tuple[GpuSpec, ...] = (
    _spec(r"GB300", "Blackwell", "nvlink5", 18, 6, _GB_C2C),
    _spec(r"B300", "Blackwell", "nvlink5", 18, 6),
    _spec(r"GB200", "Blackwell", "nvlink5", 18, 5, _GB_C2C),
    _spec(r"B200|B100", "Blackwell", "nvlink5", 18, 5),
    _spec(r"H100 NVL|H100 PCIE|H100-PCIE", "Hopper", "nvlink4", 12, 5),  # three NVLink bridges
    _spec(r"H800", "Hopper", "nvlink4", 8, 5),  # 400 GB/s export part (nccl#1374)
    _spec(r"GH200", "Hopper", "nvlink4", 18, 5, _GH200_C2C),
    _spec(r"H200|H100|H20\b", "Hopper", "nvlink4", 18, 5),
    _spec(r"A800", "Ampere", "nvlink3", 8, 4),
    _spec(r"A100", "Ampere", "nvlink3", 12, 4),  # SXM4 and PCIe (three bridges)
    _spec(r"\bA30\b", "Ampere", "nvlink3", 4, 4),
    _spec(r"RTX 3090|RTX A6000|\bA6000\b|\bA40\b|RTX A5000|\bA5000\b", "Ampere", "nvlink3-ga102", 4, 4),
    _spec(r"\bA10\b|\bA10G\b|\bA16\b|\bA2\b|RTX 30\d0", "Ampere", None, 0, 4),
    _spec(r"V100", "Volta", "nvlink2", 6, 3),
    _spec(r"TITAN V\b", "Volta", None, 0, 3),
    _spec(r"P100", "Pascal", "nvlink1", 4, 3),
    _spec(r"RTX 6000 ADA|RTX 5000 ADA|RTX 4000 ADA", "Ada", None, 0, 4),
    _spec(r"TITAN RTX|RTX 2080|QUADRO RTX [568]000|\bRTX [568]000\b", "Turing", "nvlink2", 2, 3),
    _spec(r"\bT4\b|RTX 20\d0|GTX 16\d0", "Turing", None, 0, 3),
    _spec(r"L40S|\bL40\b|\bL4\b|RTX 40\d0", "Ada", None, 0, 4),
    _spec(r"RTX 50\d0|RTX PRO 6000", "Blackwell", None, 0, 5),
)

_COMPILED = tuple((re.compile(s.pattern), s) for s in GPU_SPECS)


@cache
def gpu_spec(model: str) -> GpuSpec | None:
    """The spec of a GPU product name, or None when the name is empty or unknown."""
    name = " ".join(model.upper().replace("_", " ").split())
    if not name:
        return None
    for regex, spec in _COMPILED:
        if regex.search(name):
            return spec
    return None


def nvlink_generation(gpu: Gpu) -> NvlinkGeneration:
    """The NVLink of a GPU: by its model where known (that tells GA102 bridges apart), else by version."""
    spec = gpu_spec(gpu.model)
    if spec is not None and spec.nvlink is not None:
        return spec.nvlink
    return _BY_VERSION.get(gpu.nvlink_version, UNKNOWN_NVLINK)


def c2c_gbps(gpu: Gpu) -> float:
    """The GPU's NVLink-C2C bandwidth to its Grace (GB/s per direction): NVML's where reported, else its model's.

    0 for a GPU reached over PCIe. A C2C GPU of unknown model gets the Grace Blackwell figure.
    """
    if not gpu.c2c:
        return 0.0
    if gpu.c2c_gbps:
        return gpu.c2c_gbps
    spec = gpu_spec(gpu.model)
    return spec.c2c_gbps if spec is not None and spec.c2c_gbps else _GB_C2C[1]


def pcie_generation(gpu: Gpu) -> int:
    """The GPU's PCIe generation: measured where the probe filled it in, else its model's, else Gen4."""
    if gpu.pcie_generation:
        return gpu.pcie_generation
    spec = gpu_spec(gpu.model)
    return spec.pcie_generation if spec is not None else DEFAULT_PCIE_GENERATION


def pcie_x16_gbps(generation: int) -> float:
    if generation in PCIE_X16_GBPS:
        return PCIE_X16_GBPS[generation]
    return PCIE_X16_GBPS[max(PCIE_X16_GBPS)] if generation > 0 else PCIE_X16_GBPS[DEFAULT_PCIE_GENERATION]


def link_bandwidth_gbps(a: Gpu, b: Gpu, kind: LinkKind, nvlinks: int) -> float:
    """Nominal line rate of the path between two GPUs, GB/s per direction (``LinkStatus.bandwidthGBps``).

    NVLink and NVSwitch: links * per-link of the slower GPU (on NVSwitch ``nvlinks`` is the GPU's total,
    so this is the whole GPU's bandwidth); PCIe levels: the x16 rate of the older generation.
    """
    if kind in (LinkKind.NVLINK, LinkKind.NVSWITCH) and nvlinks > 0:
        per_link = min(nvlink_generation(a).per_link_gbps, nvlink_generation(b).per_link_gbps)
        return nvlinks * per_link
    return pcie_x16_gbps(min(pcie_generation(a), pcie_generation(b)))
