"""gputopo.sandbox: a local control plane with simulated GPU nodes, for the demo, tests and benchmarks; no operator.

It starts the operator as a process (``python -m gputopo.controller.main``) and never imports it.
"""

from gputopo.sandbox.cluster import DEFAULT_NAME, Sandbox, SandboxStatus
from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.profiles import PROFILES

__all__ = ["DEFAULT_NAME", "PROFILES", "Sandbox", "SandboxError", "SandboxStatus"]
