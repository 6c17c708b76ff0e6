"""NodeTopology status <-> topology, load_topology on every input form, catalog and views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from test_estimate import topologies
from topo_builders import fixture_names, node, refused_fixture_names

from gputopo.api.nodetopology import LinkKind, LinkState, NodeTopology, NodeTopologyStatus
from gputopo.topology import (
    NODE_TYPES,
    Topology,
    TopologyError,
    from_status,
    gpu_spec,
    interconnect_class,
    link_bandwidth_gbps,
    load_node_type,
    load_topology,
    nvlink_domain_size,
    nvlink_domains,
    nvlink_generation,
    to_status,
)
from gputopo.topology.catalog import fixture_text


@settings(max_examples=100, deadline=None)
@given(topologies())
def test_status_round_trip(t: Topology) -> None:
    status = to_status(t)
    assert from_status(status) == t
    again = NodeTopologyStatus.model_validate(status.to_api())
    assert from_status(again) == t


def test_status_fields() -> None:
    t = load_node_type("hgx-h100")
    status = to_status(t)
    assert len(status.links) == 28 and len(status.gpus) == 8 and len(status.nics) == 8
    assert status.links[0].kind is LinkKind.NVSWITCH and status.links[0].bandwidth_g_bps == 450
    assert status.gpus[0].nvlink.active_links == 18 and status.gpus[0].nvlink.version == 4
    assert status.nics[0].gpu_affinity[0].kind is LinkKind.PIX
    polaris = to_status(load_node_type("a100-polaris"))
    assert polaris.gpus[0].nvlink.active_links == 12
    api = status.to_api()
    assert api["links"][0]["bandwidthGBps"] == 450 and api["system"]["nvswitch"] is True


def test_from_status_refuses_what_cannot_be() -> None:
    status = to_status(load_node_type("a100-polaris"))
    missing = status.model_copy(update={"links": status.links[1:]})
    with pytest.raises(TopologyError):
        from_status(missing)
    doubled = status.model_copy(update={"links": [*status.links, status.links[0]]})
    with pytest.raises(TopologyError):
        from_status(doubled)
    gap = status.model_copy(update={"gpus": status.gpus[1:]})
    with pytest.raises(TopologyError):
        from_status(gap)


def _document(t: Topology) -> dict[str, object]:
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {"name": "n1"},
        "status": to_status(t).to_api(),
    }


def test_load_topology_every_form(tmp_path: Path) -> None:
    t = load_node_type("dgx-a100")
    whole = yaml.safe_dump(_document(t))
    status_only = yaml.safe_dump(to_status(t).to_api())
    assert load_topology(whole) == t
    assert load_topology(status_only) == t
    path = tmp_path / "dgx.yaml"
    path.write_text(whole)
    assert load_topology(path) == t
    assert load_topology(str(path)) == t
    text = tmp_path / "dgx.txt"
    text.write_text(fixture_text("dgx-a100-8gpu-nv12-10xmlx5.txt"))
    smi = load_topology(text, gpu_model="NVIDIA A100-SXM4-80GB")
    assert smi.gpu_model == "NVIDIA A100-SXM4-80GB" and smi.links == t.links
    renamed = load_topology(whole, gpu_model="NVIDIA H100 80GB HBM3")
    assert renamed.gpu_model == "NVIDIA H100 80GB HBM3" and renamed.gpus[0].nvlink_version == 4
    NodeTopology.model_validate(yaml.safe_load(whole))
    assert load_topology(yaml.safe_dump({"status": to_status(t).to_api()})) == t
    listed = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [_document(t)]})
    assert load_topology(listed) == t
    with pytest.raises(TopologyError, match="list of 2"):
        load_topology(yaml.safe_dump({"kind": "List", "items": [_document(t), _document(t)]}))
    assert load_topology(json.dumps(_document(t))) == t


def test_load_topology_errors() -> None:
    with pytest.raises(TopologyError):
        load_topology("status:\n  gpus: [{index: -1}]\nkind: NodeTopology\n")
    with pytest.raises(TopologyError):
        load_topology("just some words")


# -- catalog ------------------------------------------------------------------------------------------------------


def test_catalog_covers_every_fixture() -> None:
    # Every fixture the importer reads; those it refuses as cut short cannot make a node type.
    assert {t.fixture for t in NODE_TYPES.values() if t.fixture} == set(fixture_names()) - set(refused_fixture_names())
    assert [t.name for t in NODE_TYPES.values() if not t.fixture] == ["gb200-tray"], "built, no posted matrix"
    for name in ("hgx-h100", "dgx-a100", "hgx-a100", "h100-nvl-pairs", "dgx1-v100", "rtx4090-pcie", "l40s-pcie"):
        assert name in NODE_TYPES
    assert "a100-polaris" in NODE_TYPES


@pytest.mark.parametrize("name", list(NODE_TYPES))
def test_node_types_load(name: str) -> None:
    kind = NODE_TYPES[name]
    t = load_node_type(name)
    assert load_node_type(name) is t, "one shared object per node type"
    assert t.gpu_model == kind.gpu_model and gpu_spec(kind.gpu_model) is not None
    assert all(n.rate_gbps == kind.nic_rate_gbps and n.link_layer == kind.link_layer for n in t.nics)
    assert all(g.pcie_generation > 0 for g in t.gpus)


def test_gb200_tray_node_type() -> None:
    t = load_node_type("gb200-tray")
    assert t.gpu_count == 4 and t.system.nvswitch
    assert all(link.kind is LinkKind.NVSWITCH and link.nvlinks == 18 for link in t.links.values())
    assert [n.rate_gbps for n in t.nics] == [400.0] * 4
    assert [g.numa_node for g in t.gpus] == [0, 0, 1, 1], "two Grace NUMA nodes"
    assert all(g.c2c for g in t.gpus) and [n.numa_node for n in t.nics] == [0, 0, 1, 1], "two NICs per Grace"
    assert from_status(to_status(t)) == t


def test_hgx_h100_node_type() -> None:
    t = load_node_type("hgx-h100")
    assert t.gpu_count == 8 and len(t.nics) == 8 and interconnect_class(t) == "nvswitch"
    assert {link.nvlinks for link in t.links.values()} == {18}
    assert t.nics[0].rate_gbps == 400 and t.system.gpudirect_rdma


def test_unknown_node_type() -> None:
    with pytest.raises(KeyError, match="hgx-h100"):
        load_node_type("nope")


# -- bandwidth table and views --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "generation", "per_link", "links"),
    [
        ("NVIDIA H100 80GB HBM3", 4, 25.0, 18),
        ("NVIDIA H100 NVL", 4, 25.0, 12),
        ("NVIDIA H200", 4, 25.0, 18),
        ("NVIDIA H800", 4, 25.0, 8),
        ("NVIDIA B200", 5, 50.0, 18),
        ("NVIDIA A100-SXM4-40GB", 3, 25.0, 12),
        ("NVIDIA A100 80GB PCIe", 3, 25.0, 12),
        ("NVIDIA GeForce RTX 3090", 3, 14.0625, 4),
        ("NVIDIA RTX A6000", 3, 14.0625, 4),
        ("NVIDIA A40", 3, 14.0625, 4),
        ("Tesla V100-SXM2-32GB", 2, 25.0, 6),
        ("Tesla P100-SXM2-16GB", 1, 20.0, 4),
        ("NVIDIA TITAN RTX", 2, 25.0, 2),
    ],
)
def test_nvlink_table(model: str, generation: int, per_link: float, links: int) -> None:
    spec = gpu_spec(model)
    assert spec is not None and spec.nvlink is not None
    assert (spec.nvlink.version, spec.nvlink.per_link_gbps, spec.nvlinks) == (generation, per_link, links)


@pytest.mark.parametrize("model", ["NVIDIA L40S", "NVIDIA GeForce RTX 4090", "NVIDIA L4", "Tesla T4", "NVIDIA A10"])
def test_gpus_without_nvlink(model: str) -> None:
    spec = gpu_spec(model)
    assert spec is not None and spec.nvlink is None


def test_unknown_model_falls_back_to_version() -> None:
    from gputopo.topology import Gpu

    assert gpu_spec("") is None and gpu_spec("Something Else") is None
    assert nvlink_generation(Gpu(0, nvlink_version=5)).per_link_gbps == 50.0
    assert nvlink_generation(Gpu(0)).per_link_gbps == 25.0
    a, b = Gpu(0, pcie_generation=3), Gpu(1, pcie_generation=5)
    assert link_bandwidth_gbps(a, b, LinkKind.SYS, 0) == 15.75


def test_interconnect_classes() -> None:
    assert interconnect_class(node(4).all("NODE").build()) == "pcie"
    assert interconnect_class(node(4).nvlink(0, 1, 4).nvlink(2, 3, 4).build()) == "nvlink-pairs"
    assert interconnect_class(node(4).nvlink(0, 1, 2).nvlink(0, 2, 2).nvlink(1, 2, 2).build()) == "nvlink-mesh"
    assert interconnect_class(node(8).nvswitch(18).build()) == "nvswitch"
    down = node(8).nvswitch(18).build().with_link_state(0, 1, LinkState.DOWN)
    assert interconnect_class(down) == "nvswitch"
    assert nvlink_domain_size(down) == 7


def test_nvlink_domains() -> None:
    dgx1 = load_node_type("dgx1-v100")
    assert nvlink_domains(dgx1)[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert nvlink_domains(load_node_type("h100-nvl-pairs")) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert nvlink_domains(load_node_type("rtx4090-pcie")) == []
    star = node(4).nvlink(0, 1, 1).nvlink(0, 2, 1).nvlink(0, 3, 1).build()
    assert nvlink_domain_size(star) == 2
