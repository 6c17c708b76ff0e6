"""Discovery of a GPU node's interconnect: NVML for GPUs and NVLink, sysfs for PCIe paths and RDMA NICs."""

from gputopo_probe.discovery.inventory import Inventory, NvlinkPort, discover

__all__ = ["Inventory", "NvlinkPort", "discover"]
