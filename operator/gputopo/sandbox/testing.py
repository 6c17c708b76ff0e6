"""What integration tests get from a sandbox fixture: the running sandbox, kubectl, JSON reads and polling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo.sandbox.binaries import find_binaries
from gputopo.sandbox.cluster import Sandbox
from gputopo.sandbox.harness import WaitTimeoutError, wait_for

__all__ = ["SandboxHandle", "WaitTimeoutError", "run_operator", "running_sandbox", "wait_for"]


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

    def free_gpu_nodes(self, count: int, gpus: int = 8) -> list[str]:
        """``count`` nodes of ``gpus`` GPUs that no Pending or Running pod is on, in the sandbox's order; an
        ``AssertionError`` when it has fewer."""
        pods = self.get_json("pods", "-A")["items"]
        busy = {p["spec"].get("nodeName") for p in pods if p["status"].get("phase") in ("Pending", "Running")}
        sizes = {
            t["metadata"]["name"]: len((t.get("status") or {}).get("gpus") or [])
            for t in self.get_json("nodetopology")["items"]
        }
        found: list[str] = []
        for node in self.nodes:
            if node not in busy and sizes.get(node) == gpus:
                found.append(node)
                if len(found) == count:
                    return found
        raise AssertionError(f"{count} free {gpus}-GPU nodes wanted, the sandbox has {len(found)}")

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.25) -> Any:
        """Poll ``predicate`` until it returns something truthy; fail with ``what`` at the deadline."""
        return wait_for(what, predicate, timeout, every)


@contextmanager
def running_sandbox(name: str, *, nodes: int, profile: str, **up: Any) -> Iterator[SandboxHandle]:
    """A sandbox up for a test session or module (reused when one of that shape runs), down afterwards unless
    GPUTOPO_KEEP_SANDBOX=1. A SandboxError says what is missing, e.g. the binaries and how to build them."""
    bins = find_binaries()
    box = Sandbox(name)
    status = box.up(nodes=nodes, profile=profile, operator=False, **up)
    try:
        yield SandboxHandle(box, box.kubeconfig, status.nodes, box.fault_dir, bins.bin_dir)
    finally:
        if os.environ.get("GPUTOPO_KEEP_SANDBOX") != "1":
            box.down()


def run_operator(env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """The operator run standalone in a process of its own with ``env``, to its end (a start that fails)."""
    return subprocess.run(
        [sys.executable, "-m", "gputopo.controller.main", "--standalone"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
