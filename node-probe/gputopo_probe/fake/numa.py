"""A fake node's NUMA nodes: one per CPU (its PCI devices' nodes), and on Grace one more per GPU, its own memory.

The kernel of a Grace host numbers the Graces' nodes first, then gives each GPU eight (its memory, and nodes that
MIG memory partitions take): NVML's ``nvmlDeviceGetNumaNodeId`` and nvidia-smi's "GPU NUMA ID" name the first of
them, 1 on a GH200, 2, 10, 18 and 26 on a GB200 or GB300 tray. Those nodes have no CPUs. The fake sysfs
writes only that first node of each GPU's (a farm writes one tree per node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gputopo.topology.model import Topology
from gputopo_probe.fake.pcitree import PciTree

__all__ = ["GPU_MEMORY_NODES", "NumaLayout", "numa_layout"]

GPU_MEMORY_NODES: Final = 8
_CPUS_PER_NODE: Final = 72  # a Grace's Neoverse V2 cores; any count does for an x86 fake


@dataclass(frozen=True, slots=True)
class NumaLayout:
    cpus: Mapping[int, range]
    """Each CPU node's CPUs, numbered on from node to node."""
    gpu_cpu_node: tuple[int | None, ...]
    """Per GPU, its CPU's node (its PCI device's)."""
    gpu_memory_node: tuple[int | None, ...]
    """Per GPU, the first node of its own memory (a C2C GPU's), else None."""

    def cpus_of(self, gpu: int) -> range | list[int]:
        """The GPU's ideal CPU affinity: its node's CPUs; every CPU where its node is unknown."""
        node = self.gpu_cpu_node[gpu]
        if node is not None and node in self.cpus:
            return self.cpus[node]
        return [cpu for cpus in self.cpus.values() for cpu in cpus]


def numa_layout(topology: Topology, tree: PciTree) -> NumaLayout:
    devices = [*tree.gpus, *tree.nics.values()]
    nodes = sorted({d.numa_node for d in devices if d.numa_node is not None}) or [0]
    cpus = {node: range(n * _CPUS_PER_NODE, (n + 1) * _CPUS_PER_NODE) for n, node in enumerate(nodes)}
    first = max(nodes) + 1
    memory = tuple(first + GPU_MEMORY_NODES * g.index if g.c2c else None for g in topology.gpus)
    return NumaLayout(cpus, tuple(d.numa_node for d in tree.gpus), memory)
