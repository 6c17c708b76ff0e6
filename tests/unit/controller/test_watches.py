"""The NodeTopology and NodePodGpus watches' facts: what a new publication rebuilds, and what it keeps."""

from __future__ import annotations

from typing import Any, cast

from gputopo.api.nodepodgpus import PodGpus
from gputopo.api.nodetopology import GpuHealthState
from gputopo.controller.watches import ClusterWatches
from gputopo.kube.client import KubeClient
from gputopo.topology.catalog import load_node_type
from gputopo.topology.convert import to_status


def published(at: str, *, hot_gpu: int | None = None) -> dict[str, Any]:
    topology = load_node_type("hgx-h100")
    if hot_gpu is not None:
        topology = topology.with_gpu_health(hot_gpu, GpuHealthState.UNHEALTHY, "too hot")
    status = to_status(topology).model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"metadata": {"name": "n1"}, "status": {**status, "observedAt": at}}


def pods_published(pods: list[dict[str, Any]], at: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1"}, "status": {"observedAt": at, "pods": pods}}


def watches() -> ClusterWatches:
    return ClusterWatches(cast(KubeClient, object()), lambda: None)


def test_a_republication_of_the_same_hardware_keeps_the_facts_and_the_model_object() -> None:
    """The planner keeps its estimates per model object: a resync of the probe must not cost them."""
    w = watches()
    first = w._topology("n1", published("2026-01-01T00:00:00Z"), None)
    again = w._topology("n1", published("2026-01-01T00:10:00Z"), first)
    assert again is first and first.topology is not None


def test_a_change_of_the_hardware_builds_a_new_model() -> None:
    w = watches()
    first = w._topology("n1", published("2026-01-01T00:00:00Z"), None)
    second = w._topology("n1", published("2026-01-01T00:00:05Z", hot_gpu=3), first)
    assert second.topology is not first.topology
    assert second.topology is not None and not second.topology.gpus[3].healthy


def test_a_status_that_does_not_parse_gives_no_model_and_says_why() -> None:
    w = watches()
    odd = w._topology("n1", {"status": {"gpus": "many"}}, None)
    assert odd.topology is None and odd.error


def test_a_pod_report_stamps_each_pod_and_a_heartbeat_is_no_change() -> None:
    w = watches()
    first = w._pod_gpus("n1", pods_published([], "2026-01-01T00:00:00Z"), None)
    pod = {"namespace": "ml", "name": "job-0", "gpus": [0, 1]}
    second = w._pod_gpus("n1", pods_published([pod], "2026-01-01T00:00:05Z"), first)
    assert second.pods == (PodGpus(namespace="ml", name="job-0", gpus=[0, 1]),)
    assert second.seen_at is not None and second.pod_since[("ml", "job-0")] == second.seen_at
    beat = w._pod_gpus("n1", pods_published([pod], "2026-01-01T00:01:05Z"), second)
    assert beat == second, "equal facts: the reflector wakes no pass"
    assert beat.seen_at is not None and second.seen_at is not None and beat.seen_at > second.seen_at
    assert beat.pod_since == second.pod_since
