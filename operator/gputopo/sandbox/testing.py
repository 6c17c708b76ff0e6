"""What integration tests get from the session's sandbox fixture: kubectl, JSON reads and polling."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo.sandbox.cluster import Sandbox

__all__ = ["SandboxHandle", "WaitTimeoutError"]


class WaitTimeoutError(AssertionError):
    """A condition a test waited for did not come true before its deadline."""


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
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(every)
        raise WaitTimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
