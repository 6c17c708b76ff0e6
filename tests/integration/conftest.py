"""The session's sandbox: a real kube-apiserver, kube-scheduler and kube-controller-manager with simulated
GPU nodes and fake probes. Reused when one with the same shape already runs; torn down at the end unless
GPUTOPO_KEEP_SANDBOX=1.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputopo.sandbox import Sandbox, SandboxError
from gputopo.sandbox.binaries import find_binaries

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test")
NODES = int(os.environ.get("GPUTOPO_TEST_NODES", "16"))
PROFILE = os.environ.get("GPUTOPO_TEST_PROFILE", "mixed")


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
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxHandle]:
    try:
        bins = find_binaries()
    except SandboxError as error:
        pytest.fail(str(error))
    box = Sandbox(NAME)
    status = box.up(nodes=NODES, profile=PROFILE, operator=False)
    os.environ["KUBECONFIG"] = str(box.kubeconfig)
    try:
        yield SandboxHandle(box, box.kubeconfig, status.nodes, box.fault_dir, bins.bin_dir)
    finally:
        if os.environ.get("GPUTOPO_KEEP_SANDBOX") != "1":
            box.down()
