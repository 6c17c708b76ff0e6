"""The fixtures of a test module that runs its own sandbox: the sandbox, an operator that watches one namespace
with the module's settings, and a clean slate of jobs per test (and of ``other``, the namespace that plays
workloads outside gputopo)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, namespaced_operator
from gputopo.sandbox.testing import SandboxHandle, running_sandbox

__all__ = ["own_sandbox"]


def own_sandbox(
    name: str, namespace: str, other: str, settings: dict[str, str], **up: Any
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """The ``box``, ``operator`` and ``jobs`` fixtures; ``up`` goes to ``running_sandbox``."""

    @pytest.fixture(scope="module")
    def box() -> Iterator[SandboxHandle]:
        with running_sandbox(name, **up) as handle:
            yield handle

    @pytest.fixture(scope="module")
    def operator(box: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
        log_file = tmp_path_factory.mktemp(namespace) / "operator.log"
        with namespaced_operator(box.kubectl, box.kubeconfig, log_file, namespace, settings) as proc:
            yield proc

    @pytest.fixture
    def jobs(box: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
        with namespace_jobs(box.kubectl, namespace, operator) as handle:
            yield handle
        box.kubectl("delete", "namespace", other, "--wait=false", check=False)

    return box, operator, jobs
