"""Cluster files: nodes by node-type name or by an inline topology file (nvidia-smi or NodeTopology YAML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.placement import Placement, Request, place
from gputopo.placement.cluster_file import snapshot_from_data
from gputopo.topology import TopologyError, load_node_type, to_status
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


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"topology": "missing.txt"}, "no topology file"),
        ({"type": "hgx-h100", "topology": "h100.txt"}, "either type or topology"),
        ({}, "needs a type"),
    ],
    ids=["missing-file", "both-given", "neither-given"],
)
def test_bad_node_entries_say_why(files: Path, raw: dict[str, Any], words: str) -> None:
    with pytest.raises(TopologyError, match=words):
        snapshot_from_data(cluster(raw), base=files)
