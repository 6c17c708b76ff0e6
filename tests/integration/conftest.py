"""The session's sandbox: a real kube-apiserver, kube-scheduler and kube-controller-manager with simulated
GPU nodes and fake probes. Reused when one with the same shape already runs; torn down at the end unless
GPUTOPO_KEEP_SANDBOX=1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs
from gputopo.sandbox.testing import SandboxHandle, running_sandbox

sys.path.insert(0, str(Path(__file__).parent))  # own_sandbox

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test")
NODES = int(os.environ.get("GPUTOPO_TEST_NODES", "16"))
PROFILE = os.environ.get("GPUTOPO_TEST_PROFILE", "mixed")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox(NAME, nodes=NODES, profile=PROFILE) as handle:
        os.environ["KUBECONFIG"] = str(handle.kubeconfig)
        yield handle


@pytest.fixture
def jobs(sandbox: SandboxHandle, operator: OperatorProcess, request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """The TrainingJobs of the module's ``NS``, which its ``operator`` fixture watches; emptied after each test."""
    with namespace_jobs(sandbox.kubectl, request.module.NS, operator) as handle:
        yield handle
