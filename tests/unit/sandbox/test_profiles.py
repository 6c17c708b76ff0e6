"""Sandbox profiles lay nodes out leaf by leaf, one node type per leaf."""

from collections import Counter
from pathlib import Path

import pytest
import yaml

from gputopo.api.nodetopology import NicRole
from gputopo.sandbox import SandboxError
from gputopo.sandbox.binaries import find_binaries
from gputopo.sandbox.nodes import KWOK_ANNOTATION, node_manifest
from gputopo.sandbox.profiles import PROFILES, TIER0_LABEL, TIER1_LABEL, domain_fabric, plan_nodes
from gputopo.topology.fabric import node_domain
from gputopo_probe.farm import FarmNode, farm_topology, read_nodes_file


@pytest.mark.parametrize("profile", sorted(PROFILES), ids=str)
def test_every_leaf_holds_one_node_type(profile: str) -> None:
    plans = plan_nodes(profile, 32)
    types_per_leaf: dict[str, set[str]] = {}
    for plan in plans:
        types_per_leaf.setdefault(plan.leaf, set()).add(plan.node_type)
    assert all(len(types) == 1 for types in types_per_leaf.values())
    assert len({p.name for p in plans}) == 32


def test_mixed_profile_has_every_kind_of_interconnect_in_16_nodes() -> None:
    kinds = Counter(p.node_type for p in plan_nodes("mixed", 16))
    assert {"hgx-h100", "dgx-a100", "h100-nvl-pairs", "dgx1-v100", "rtx4090-pcie"} <= set(kinds)


def test_spines_group_leaves() -> None:
    plans = plan_nodes("mixed", 16)
    assert {p.spine for p in plans} == {"spine-00", "spine-01"}
    assert plans[0].leaf == plans[1].leaf != plans[2].leaf


def test_nvl72_profile_is_racks_of_18_trays_two_racks_per_leaf() -> None:
    plans = plan_nodes("nvl72", 72)
    racks = Counter(p.nvlink_domain for p in plans)
    assert racks == {f"rack-{r:02d}": 18 for r in range(4)}
    assert {p.node_type for p in plans} == {"gb200-tray"}
    leaves = {p.nvlink_domain: p.leaf for p in plans}
    assert leaves == {"rack-00": "leaf-00", "rack-01": "leaf-00", "rack-02": "leaf-01", "rack-03": "leaf-01"}
    assert all(not p.nvlink_domain for p in plan_nodes("mixed", 8))


def test_a_farm_node_of_a_rack_discovers_the_racks_fabric(tmp_path: Path) -> None:
    plan = plan_nodes("nvl72", 20)[19]  # a tray of the second rack
    cluster_uuid, clique = domain_fabric(plan.nvlink_domain)
    nodes_file = tmp_path / "nodes.yaml"
    entry = {"node": plan.name, "topology": plan.node_type, "fabric": {"clusterUuid": cluster_uuid, "cliqueId": clique}}
    nodes_file.write_text(yaml.safe_dump({"nodes": [entry]}))
    (spec,) = read_nodes_file(nodes_file)
    topology = farm_topology(spec)
    assert node_domain(topology).clique == f"{cluster_uuid}.{clique}"
    assert domain_fabric("rack-01") == (cluster_uuid, clique) != domain_fabric("rack-00")


@pytest.mark.parametrize(
    ("profile", "count", "message"),
    [("nope", 4, "unknown profile 'nope'"), ("mixed", 0, "at least one node")],
    ids=["unknown-profile", "no-nodes"],
)
def test_bad_profile_requests_are_refused(profile: str, count: int, message: str) -> None:
    with pytest.raises(SandboxError, match=message):
        plan_nodes(profile, count)


def test_node_manifest_is_a_kwok_gpu_node() -> None:
    plan = plan_nodes("hgx-h100", 1)[0]
    node = node_manifest(plan, 8, "NVIDIA H100 80GB HBM3")
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"][TIER0_LABEL] == "leaf-00"
    assert node["metadata"]["labels"][TIER1_LABEL] == "spine-00"


def test_missing_binaries_say_how_to_build_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTOPO_K8S_BIN", str(tmp_path))
    with pytest.raises(SandboxError, match=r"not built yet .*kube-apiserver.*build-k8s\.sh"):
        find_binaries()


@pytest.mark.parametrize(
    ("profile", "gpus", "racks"),
    [("gb300", 4, {"rack-00": 18, "rack-01": 2}), ("gh200", 1, {"": 20})],
    ids=["gb300", "gh200"],
)
def test_grace_profiles_have_c2c_and_nic_roles(profile: str, gpus: int, racks: dict[str, int]) -> None:
    plans = plan_nodes(profile, 20)
    assert Counter(p.nvlink_domain for p in plans) == racks
    (node_type,) = {p.node_type for p in plans}
    topology = farm_topology(FarmNode("n1", node_type))
    assert topology.gpu_count == gpus and all(g.c2c for g in topology.gpus)
    assert {n.role for n in topology.nics} >= {NicRole.COMPUTE, NicRole.FRONT_END}
