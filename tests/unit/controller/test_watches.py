"""The NodeTopology watch's facts: what a new publication rebuilds, and what it keeps."""

from __future__ import annotations

from typing import Any, cast

from gputopo.api.nodetopology import GpuHealthState, PodGpus
from gputopo.control.quarantine import Quarantine
from gputopo.controller.client import KubeClient
from gputopo.controller.watches import ClusterWatches
from gputopo.topology.catalog import load_node_type
from gputopo.topology.convert import to_status


def published(pods: list[dict[str, Any]], at: str, *, hot_gpu: int | None = None) -> dict[str, Any]:
    topology = load_node_type("hgx-h100")
    if hot_gpu is not None:
        topology = topology.with_gpu_health(hot_gpu, GpuHealthState.UNHEALTHY, "too hot")
    status = to_status(topology).model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"metadata": {"name": "n1"}, "status": {**status, "observedAt": at, "pods": pods}}


def watches() -> ClusterWatches:
    return ClusterWatches(cast(KubeClient, object()), Quarantine(seconds=0), lambda: None)


def test_a_publication_whose_only_change_is_its_pods_keeps_the_model_object() -> None:
    """The planner keeps its estimates per model object: a pod bound on the node must not cost them."""
    w = watches()
    first = w._topology("n1", published([], "2026-01-01T00:00:00Z"), None)
    pod = {"namespace": "ml", "name": "job-0", "gpus": [0, 1]}
    second = w._topology("n1", published([pod], "2026-01-01T00:00:05Z"), first)
    assert second.topology is first.topology is not None
    assert second.pods == (PodGpus(namespace="ml", name="job-0", gpus=[0, 1]),)
    assert second.observed_at is not None and second.observed_at > (first.observed_at or second.observed_at)
    assert second.pod_since[("ml", "job-0")] == second.observed_at


def test_a_change_of_the_hardware_builds_a_new_model() -> None:
    w = watches()
    first = w._topology("n1", published([], "2026-01-01T00:00:00Z"), None)
    second = w._topology("n1", published([], "2026-01-01T00:00:05Z", hot_gpu=3), first)
    assert second.topology is not first.topology
    assert second.topology is not None and not second.topology.gpus[3].healthy


def test_pods_that_do_not_parse_rebuild_the_facts_from_the_whole_status() -> None:
    w = watches()
    first = w._topology("n1", published([], "2026-01-01T00:00:00Z"), None)
    odd = w._topology("n1", published([{"namespace": "ml", "gpus": "many"}], "2026-01-01T00:00:05Z"), first)
    assert odd.topology is None and odd.error
