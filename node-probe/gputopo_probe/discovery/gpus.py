"""Per-GPU and per-system facts from NVML (plus the GPU's CPU's NUMA node, from sysfs and NVML)."""

from __future__ import annotations

from typing import Any

from gputopo.topology.model import Gpu, SystemFacts
from gputopo_probe.discovery.c2c import read_c2c
from gputopo_probe.discovery.fabric import read_fabric
from gputopo_probe.discovery.numa import gpu_numa_node
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.nvml import ARCHITECTURES, Nvml, normalise_bus_id

__all__ = ["dra_device_names", "read_gpu", "read_system"]

_MIB = 1024 * 1024


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_system(nvml: Nvml, *, nvswitch: bool, gpudirect_rdma: bool) -> SystemFacts:
    driver = _text(nvml.optional("nvmlSystemGetDriverVersion", default=""))
    cuda = nvml.optional("nvmlSystemGetCudaDriverVersion", default=0)
    cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) and cuda > 0 else ""
    return SystemFacts(
        driver_version=driver, cuda_driver_version=cuda_text, nvswitch=nvswitch, gpudirect_rdma=gpudirect_rdma
    )


def read_gpu(nvml: Nvml, sysfs: Sysfs, index: int, handle: Any, nvlink_version: int) -> Gpu:
    """One GPU's facts; a field NVML does not support stays at its empty value."""
    pci = nvml.call("nvmlDeviceGetPciInfo", handle)
    bus_id = normalise_bus_id(pci.busId)
    arch = nvml.optional("nvmlDeviceGetArchitecture", handle, default=None)
    memory = nvml.optional("nvmlDeviceGetMemoryInfo", handle, default=None)
    c2c = read_c2c(nvml, handle)
    return Gpu(
        index=index,
        uuid=_text(nvml.call("nvmlDeviceGetUUID", handle)),
        model=_text(nvml.optional("nvmlDeviceGetName", handle, default="")),
        architecture=ARCHITECTURES.get(arch, "") if isinstance(arch, int) else "",
        memory_mib=int(memory.total) // _MIB if memory is not None else 0,
        pci_bus_id=bus_id,
        numa_node=gpu_numa_node(nvml, sysfs, handle, bus_id, c2c=c2c.links > 0),
        pcie_generation=int(nvml.optional("nvmlDeviceGetMaxPcieLinkGeneration", handle, default=0)),
        pcie_width=int(nvml.optional("nvmlDeviceGetMaxPcieLinkWidth", handle, default=0)),
        nvlink_version=nvlink_version,
        fabric=read_fabric(nvml, handle),
        c2c_links=c2c.links,
        c2c_gbps=c2c.gbps,
    )


def dra_device_names(nvml: Nvml) -> dict[str, int]:
    """NVIDIA's DRA driver's device name of each GPU (``gpu-<minor>``, after ``/dev/nvidia<minor>``, which need not
    be the NVML index) -> its NVML index; a GPU whose minor NVML cannot give is left out."""
    out: dict[str, int] = {}
    for index in range(nvml.call("nvmlDeviceGetCount")):
        minor = nvml.optional("nvmlDeviceGetMinorNumber", nvml.call("nvmlDeviceGetHandleByIndex", index), default=None)
        if isinstance(minor, int):
            out[f"gpu-{minor}"] = index
    return out
