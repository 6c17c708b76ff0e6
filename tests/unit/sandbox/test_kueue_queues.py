"""Kueue's queues for a sandbox: quotas summed from the nodes' allocatable resources, both flavors over the GPU
nodes (only the TAS one on the Topology of the switch tiers), and a ClusterQueue and LocalQueue for each."""

from __future__ import annotations

from typing import Any

import pytest

from gputopo.api.group import GPU_RESOURCE
from gputopo.sandbox.kueue_queues import (
    GPU_NODE_LABELS,
    GPUTOPO_QUEUE,
    HOSTNAME_LABEL,
    TAS_QUEUE,
    TOPOLOGY,
    capacity_quota,
    cluster_queue,
    sandbox_queues,
)
from gputopo.sandbox.profiles import TIER0_LABEL, TIER1_LABEL


def node(**allocatable: str) -> dict[str, Any]:
    """A Node of ``allocatable`` resources; ``gpu`` stands for nvidia.com/gpu."""
    return {"status": {"allocatable": {GPU_RESOURCE if k == "gpu" else k: v for k, v in allocatable.items()}}}


@pytest.mark.parametrize(
    ("nodes", "quota"),
    [
        pytest.param([], {GPU_RESOURCE: "0", "cpu": "0", "memory": "0"}, id="no-nodes"),
        pytest.param(
            [node(gpu="8", cpu="128", memory="2Ti")] * 2,
            {GPU_RESOURCE: "16", "cpu": "256", "memory": str(4 * 2**40)},
            id="two-sandbox-nodes",
        ),
        pytest.param(
            [node(cpu="1500m", memory="1G"), node(cpu="1", memory="512Mi")],
            {GPU_RESOURCE: "0", "cpu": "2500m", "memory": str(10**9 + 512 * 2**20)},
            id="milli-cpus-and-decimal-memory-without-gpus",
        ),
    ],
)
def test_the_quota_is_the_nodes_allocatable(nodes: list[dict[str, Any]], quota: dict[str, str]) -> None:
    assert capacity_quota(nodes) == quota


def test_both_flavors_cover_the_gpu_nodes_and_only_the_tas_one_has_the_topology() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in sandbox_queues({GPU_RESOURCE: "64"})}
    levels = [level["nodeLabel"] for level in objects[("Topology", TOPOLOGY)]["spec"]["levels"]]
    assert levels == [TIER1_LABEL, TIER0_LABEL, HOSTNAME_LABEL]
    assert objects[("ResourceFlavor", GPUTOPO_QUEUE)]["spec"] == {"nodeLabels": GPU_NODE_LABELS}
    assert objects[("ResourceFlavor", TAS_QUEUE)]["spec"] == {"nodeLabels": GPU_NODE_LABELS, "topologyName": TOPOLOGY}
    for name in (GPUTOPO_QUEUE, TAS_QUEUE):
        flavors = objects[("ClusterQueue", name)]["spec"]["resourceGroups"][0]["flavors"]
        assert flavors == [{"name": name, "resources": [{"name": GPU_RESOURCE, "nominalQuota": "64"}]}]
        local = objects[("LocalQueue", name)]
        assert (local["metadata"]["namespace"], local["spec"]["clusterQueue"]) == ("default", name)


@pytest.mark.parametrize(
    ("cohort", "spec_cohort"),
    [pytest.param(None, None, id="alone"), pytest.param("research", "research", id="in-a-cohort")],
)
def test_a_cluster_queue_admits_from_every_namespace(cohort: str | None, spec_cohort: str | None) -> None:
    queue = cluster_queue("small", GPUTOPO_QUEUE, {GPU_RESOURCE: "8", "cpu": "16"}, cohort=cohort)
    assert queue["spec"]["namespaceSelector"] == {}  # null would admit from none
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == [GPU_RESOURCE, "cpu"]
    assert queue["spec"].get("cohortName") == spec_cohort
