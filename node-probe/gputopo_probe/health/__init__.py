"""Health: per-poll readings of links, NICs and GPUs, XID events, and hysteresis over them."""

from gputopo_probe.health.hysteresis import Hysteresis
from gputopo_probe.health.monitor import HealthMonitor, Transition
from gputopo_probe.health.readings import GpuReading, Readings
from gputopo_probe.health.xid import XidWatcher

__all__ = ["GpuReading", "HealthMonitor", "Hysteresis", "Readings", "Transition", "XidWatcher"]
