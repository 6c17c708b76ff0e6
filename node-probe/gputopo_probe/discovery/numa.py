"""A GPU's NUMA node: the node of the CPU it hangs off (nvidia-smi's "NUMA Affinity"; on Grace, its own Grace's).

The model compares it with each NIC's node to find the NICs on a Grace GPU's own Grace (NCCL's P2C path,
GPUDirect RDMA through NVLink-C2C), so it is never a Grace GPU's own memory node (nvidia-smi's "GPU NUMA ID":
2, 10, 18, 26 on a GB200 tray, 1 on a GH200), which no NIC and no CPU is on. In order:

1. sysfs's ``numa_node`` of the GPU's PCI device; on a C2C GPU, only if that node has CPUs.
2. The one node holding NVML's ideal CPU affinity of the GPU (``nvmlDeviceGetCpuAffinityWithinScope`` at node
   scope, else ``nvmlDeviceGetCpuAffinity``), placed by sysfs's node CPU lists.
3. On a GPU without C2C only, ``nvmlDeviceGetNumaNodeId`` (a node with CPUs): on a C2C GPU it is the GPU
   memory's own node.

Any NVML or sysfs error but a lost GPU leaves that step unanswered; none answering leaves the node unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.nvml import AFFINITY_SCOPE_NODE, Nvml

__all__ = ["affinity_cpus", "cpu_affinity_node", "gpu_numa_node"]

_WORD_BITS: Final = 64  # pynvml's CPU set is an array of c_ulonglong, CPU n at bit n % 64 of word n // 64


def affinity_cpus(words: Any) -> frozenset[int]:
    """The CPUs of an NVML CPU set; an answer that is not a sequence of integers holds none."""
    cpus: set[int] = set()
    try:
        for n, word in enumerate(words):
            mask = int(word)
            cpus.update(n * _WORD_BITS + bit for bit in range(_WORD_BITS) if mask >> bit & 1)
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(cpus)


def cpu_affinity_node(nvml: Nvml, handle: Any, node_cpus: Mapping[int, frozenset[int]]) -> int | None:
    """The one NUMA node NVML's CPU affinity of the GPU lies on; None when it is unknown or spans several."""
    highest = max((max(cpus) for cpus in node_cpus.values() if cpus), default=None)
    if highest is None:
        return None
    words = highest // _WORD_BITS + 1
    answer = nvml.read("nvmlDeviceGetCpuAffinityWithinScope", handle, words, AFFINITY_SCOPE_NODE, default=None)
    if answer is None:
        answer = nvml.read("nvmlDeviceGetCpuAffinity", handle, words, default=None)
    cpus = affinity_cpus(answer) if answer is not None else frozenset()
    nodes = [node for node, own in node_cpus.items() if own & cpus]
    return nodes[0] if len(nodes) == 1 else None


def _sysfs_node(sysfs: Sysfs, bus_id: str) -> int | None:
    device_dir = sysfs.pci_device(bus_id) if bus_id else None
    return sysfs.numa_node(device_dir) if device_dir is not None and device_dir.exists() else None


def gpu_numa_node(nvml: Nvml, sysfs: Sysfs, handle: Any, bus_id: str, *, c2c: bool) -> int | None:
    """The NUMA node of the GPU's CPU (see the module's steps); ``c2c``: the GPU reaches its CPU over NVLink-C2C."""
    node = _sysfs_node(sysfs, bus_id)
    if node is not None and not c2c:
        return node
    node_cpus = sysfs.node_cpus()
    if node is not None and node_cpus.get(node) != frozenset():
        return node  # a node with CPUs, or one sysfs does not list: nothing says it is the GPU memory's
    node = cpu_affinity_node(nvml, handle, node_cpus)
    if node is not None or c2c:
        return node
    value = nvml.read("nvmlDeviceGetNumaNodeId", handle, default=None)
    if isinstance(value, int) and value >= 0 and node_cpus.get(value) != frozenset():
        return value
    return None
