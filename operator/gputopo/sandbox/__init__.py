"""A real local control plane with simulated GPU nodes, for the demo, the tests and the benchmarks."""

from gputopo.sandbox.cluster import DEFAULT_NAME, Sandbox, SandboxStatus
from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.profiles import PROFILES

__all__ = ["DEFAULT_NAME", "PROFILES", "Sandbox", "SandboxError", "SandboxStatus"]
