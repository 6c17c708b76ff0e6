"""What integration tests get from the session's sandbox fixture: kubectl, JSON reads and polling."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo.sandbox.cluster import Sandbox
from gputopo.sandbox.harness import WaitTimeoutError, wait_for

__all__ = ["SandboxHandle", "WaitTimeoutError", "wait_for"]


@dataclass
class SandboxHandle:
    sandbox: Sandbox
    kubeconfig: Path
    nodes: list[str]
    fault_dir: Path
    bin_dir: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.sandbox.kubectl(*args, input=input, check=check)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.25) -> Any:
        """Poll ``predicate`` until it returns something truthy; fail with ``what`` at the deadline."""
        return wait_for(what, predicate, timeout, every)
