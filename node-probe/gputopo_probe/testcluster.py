"""Fake mode publishes made-up GPUs to a real API server, and on a kind node it plays the kubelet's device plugin
or DRA driver through the kubelet's own directories: fit for test clusters only. A probe in fake mode that would
publish refuses to start unless ``GPUTOPO_PROBE_TEST_CLUSTER`` says the cluster is one (the chart sets it from
``probe.testCluster``, which it requires beside ``probe.fake``). ``--once --print`` writes nothing and needs none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gputopo_probe.errors import ProbeError

__all__ = ["TEST_CLUSTER_ENV", "TestClusterError", "require_test_cluster"]

TEST_CLUSTER_ENV: Final = "GPUTOPO_PROBE_TEST_CLUSTER"
_YES: Final = frozenset({"true", "1", "yes"})


class TestClusterError(ProbeError):
    """Fake mode asked for on a cluster not declared a test cluster."""

    __test__ = False  # a name pytest would otherwise collect


def require_test_cluster(mode: str, environ: Mapping[str, str]) -> None:
    """Raise ``TestClusterError`` unless ``environ`` declares a test cluster; ``mode`` names what asked for it."""
    value = environ.get(TEST_CLUSTER_ENV, "")
    if value.strip().lower() not in _YES:
        shown = f"{value!r}" if value else "unset"
        raise TestClusterError(
            f"{mode} publishes fake GPUs and is for test clusters only: set {TEST_CLUSTER_ENV}=true to run it "
            f"(the chart sets it with probe.testCluster=true); {TEST_CLUSTER_ENV} is {shown}"
        )
