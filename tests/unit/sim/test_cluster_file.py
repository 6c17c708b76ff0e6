"""Cluster files: nodes by node-type name or by an inline topology file (nvidia-smi or NodeTopology YAML)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.api.clusterfile import file_schemas
from gputopo.placement import Placement, Request, place
from gputopo.sim.cluster_file import ClusterFileError, snapshot_from_data, trace_from_data
from gputopo.topology import load_node_type, to_status
from gputopo.topology.catalog import NODE_TYPES, fixture_text

H100 = NODE_TYPES["hgx-h100"]


def cluster(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": [{"name": f"n{i}", **raw} for i, raw in enumerate(nodes)]}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "h100.txt").write_text(fixture_text(H100.fixture))
    status = to_status(load_node_type("hgx-h100")).model_dump(mode="json", by_alias=True, exclude_none=True)
    (tmp_path / "h100.yaml").write_text(yaml.safe_dump({"status": status, "kind": "NodeTopology"}))
    return tmp_path


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "hgx-h100"},
        {"topology": "h100.txt", "gpuModel": H100.gpu_model},
        {"topology": "h100.yaml"},
    ],
    ids=["node-type-name", "nvidia-smi-file", "nodetopology-yaml-file"],
)
def test_a_node_by_type_or_by_topology_file(files: Path, raw: dict[str, Any]) -> None:
    snap = snapshot_from_data(cluster(raw, raw), base=files)
    first, second = snap.nodes
    assert first.topology is second.topology  # one node class
    assert first.topology.gpu_count == 8 and "H100" in first.gpu_model
    assert isinstance(place(snap, Request(2, 8)), Placement)


def test_an_absolute_topology_path_needs_no_base(files: Path) -> None:
    snap = snapshot_from_data(cluster({"topology": str(files / "h100.yaml")}))
    assert snap.nodes[0].topology.gpu_count == 8


NODE = {"name": "n0", "type": "hgx-h100"}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (cluster({"topology": "missing.txt"}), "nodes[0].topology: no topology file"),
        (cluster({"topology": "garbage.txt"}), "nodes[0].topology: "),
        (cluster({"type": "hgx-h100", "topology": "h100.txt"}), "nodes[0]: Value error, give either type"),
        (cluster({}), "nodes[0]: Value error, give either type (a node type name) or topology (a file), exactly one"),
        (cluster({"type": "hgx-h999"}), "nodes[0].type: unknown node type 'hgx-h999'; known: "),
        (cluster({"type": "hgx-h100", "usedGpus": [-1]}), "nodes[0].usedGpus[0]: Input should be greater than or"),
        (cluster({"type": "hgx-h100", "usedGpus": [9]}), "nodes[0].usedGpus[0]: no GPU9; the node has GPUs 0..7"),
        (cluster({"type": "hgx-h100", "usedGpus": "0,1"}), "nodes[0].usedGpus: Input should be a valid list"),
        ({"nodes": [NODE, NODE]}, "nodes[1].name: 'n0' is already the name of nodes[0]"),
        (cluster({"type": "hgx-h100", "labels": "a=b"}), "nodes[0].labels: Input should be a valid dictionary"),
        (cluster({"type": "hgx-h100", "taints": "t"}), "nodes[0].taints: Input should be a valid list"),
        (cluster({"type": "hgx-h100", "taints": [{"key": "k", "effect": "Never"}]}), "nodes[0].taints[0].effect"),
        (cluster({"type": "hgx-h100", "downLinks": [[0, 99]]}), "nodes[0].downLinks[0][1]: no GPU99"),
        (cluster({"type": "hgx-h100", "downLinks": [[3, 3]]}), "nodes[0].downLinks[0]: a link joins two different"),
        (cluster({"type": "hgx-h100", "unhealthyGpus": "all"}), "nodes[0].unhealthyGpus: Input should be a valid list"),
        (cluster({"type": "hgx-h100", "ready": "maybe"}), "nodes[0].ready: Input should be a valid boolean"),
        (cluster({"type": "hgx-h100", "usedGPUs": [1]}), "nodes[0].usedGPUs: Extra inputs are not permitted"),
        ({"nodes": {"n0": NODE}}, "nodes: Input should be a valid list"),
        ({"tiers": [], "nodes": [NODE]}, "tiers: give at least one tier"),
        ({"tiers": [{"label": "t0", "oversubscription": 0.5}]}, "tiers[0].oversubscription: Input should be greater"),
        ("nodes", "(top level): Input should be a valid dictionary"),
        (None, "the file is empty"),
    ],
    ids=[
        "missing-topology-file", "unparsable-topology-file", "both-type-and-topology", "neither-type-nor-topology",
        "unknown-node-type", "negative-used-gpu", "used-gpu-the-node-lacks", "used-gpus-as-text", "duplicate-name",
        "labels-as-text", "taints-as-text", "unknown-taint-effect", "down-link-to-a-gpu-the-node-lacks",
        "down-link-to-itself", "unhealthy-gpus-all", "ready-not-a-boolean", "misspelt-field", "nodes-as-a-map",
        "empty-tiers", "oversubscription-below-one", "not-a-map", "empty-file",
    ],
)  # fmt: skip
def test_bad_cluster_files_name_the_field(files: Path, data: Any, words: str) -> None:
    (files / "garbage.txt").write_text("this is not a topology\n")
    with pytest.raises(ClusterFileError) as raised:
        snapshot_from_data(data, base=files)
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"jobs": [{"name": "a", "arrival": 0, "duration": 1}]}, "jobs[0].gpusPerWorker: Field required"),
        ({"jobs": [{"name": "a", "arrival": -1, "duration": 1, "gpusPerWorker": 1}]}, "jobs[0].arrival: Input"),
        ({"jobs": [{"name": "a", "arrival": 0, "duration": 0, "gpusPerWorker": 1}]}, "jobs[0].duration: Input"),
        ({"jobs": [{"name": "a", "arrival": "soon", "duration": 1, "gpusPerWorker": 1}]}, "jobs[0].arrival: Input"),
        ({"jobs": "a"}, "jobs: Input should be a valid list"),
        (None, "the file is empty"),
    ],
    ids=["no-gpus-per-worker", "negative-arrival", "zero-duration", "arrival-as-text", "jobs-as-text", "empty-file"],
)
def test_bad_trace_files_name_the_field(data: Any, words: str) -> None:
    with pytest.raises(ClusterFileError) as raised:
        trace_from_data(data)
    assert words in str(raised.value)


def test_committed_json_schemas_match_the_models() -> None:
    root = Path(__file__).parents[3] / "schemas"
    for name, schema in file_schemas().items():
        assert json.loads((root / name).read_text()) == schema, f"schemas/{name} is stale: run make crds"
