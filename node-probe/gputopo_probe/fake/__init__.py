"""A fake NVML and a fake sysfs tree built from a topology, with faults injected while the probe runs."""

from gputopo_probe.fake.faults import FaultStore, GpuFault, NodeFaults
from gputopo_probe.fake.node import FakeNode

__all__ = ["FakeNode", "FaultStore", "GpuFault", "NodeFaults"]
