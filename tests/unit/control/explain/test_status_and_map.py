"""``status`` and the map's document against a known layout."""

from __future__ import annotations

from explain_builders import cluster

from gputopo.control.explain import cluster_status, topology_map


def _layout():  # type: ignore[no-untyped-def]
    c = cluster()
    for i in range(4):
        c.node(f"a{i}", leaf="leaf-0")
    for i in range(2):
        c.node(f"b{i}", "hgx-a100", leaf="leaf-1", spine="spine-1")
    c.node("c0", "l40s-pcie", leaf="leaf-2", spine="spine-1")
    c.job("run", workers=2, on=[("a0", list(range(8))), ("a1", list(range(8)))])
    c.gang("idx", "Running", ranks=[("b0", [0, 1, 2, 3])])
    c.job("wait", workers=8, reason="Unplaceable", message="needs 8 nodes")
    c.link("a2", 2, 3).nic("b1", "mlx5_0")
    return c.build()


def test_status_by_leaf() -> None:
    data = cluster_status(_layout()).to_data()
    by = {d["domain"]: d for d in data["domains"]}
    assert list(by) == ["spine-0/leaf-0", "spine-1/leaf-1", "spine-1/leaf-2"]
    leaf0 = by["spine-0/leaf-0"]
    assert (leaf0["nodes"], leaf0["gpus"], leaf0["usedGpus"], leaf0["freeGpus"]) == (4, 32, 16, 16)
    # a0 and a1 are taken; a2's NVLink 2-3 is down, so of its 8 GPUs no group of 8 has every link up: a3 alone
    assert leaf0["fits"] == {"8": 1, "16": 0, "64": 0}
    assert leaf0["unhealthy"] == ["a2 link 2-3 Down"] and leaf0["gangs"] == ["default/run"]
    leaf1 = by["spine-1/leaf-1"]
    assert (leaf1["usedGpus"], leaf1["fits"]["8"]) == (4, 1)
    assert leaf1["gangs"] == ["default/job-idx"] and leaf1["unhealthy"] == ["b1 nic mlx5_0 Down"]
    assert by["spine-1/leaf-2"]["fits"]["8"] == 0  # PCIe only: no NVLink group of 8
    assert data["pendingByReason"] == {"TopologyPlacementFailed": 1}
    assert by["spine-1/leaf-2"]["gpus"] == 4  # one L40S PCIe node
    assert data["totals"]["gpus"] == 32 + 16 + 4


def test_map_draws_every_node_gang_and_fault_in_nested_regions() -> None:
    doc = topology_map(_layout())
    spines = doc["regions"]["children"]
    assert [s["name"] for s in spines] == ["spine-0", "spine-1"]
    assert [leaf["name"] for leaf in spines[1]["children"]] == ["spine-1/leaf-1", "spine-1/leaf-2"]
    drawn = [n for s in spines for leaf in s["children"] for n in leaf["nodes"]]
    assert sorted(drawn) == sorted(n["name"] for n in doc["nodes"]) and len(drawn) == 7
    nodes = {n["name"]: n for n in doc["nodes"]}
    gangs = [g["id"] for g in doc["gangs"]]
    assert gangs == ["default/run", "default/job-idx"]
    assert nodes["a0"]["gpus"] == [0] * 8 and nodes["b0"]["gpus"][:5] == [1, 1, 1, 1, -1]
    assert nodes["a2"]["faults"] == ["link 2-3 Down"] and nodes["b1"]["faults"] == ["nic mlx5_0 Down"]
    assert doc["pending"][0]["name"] == "default/wait"
    assert doc["pending"][0]["explanation"][1] == "Pending because (first to fix first):"
