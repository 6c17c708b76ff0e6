"""A GB300 sandbox (``--profile gb300``): fake GB300 trays publish, through the real probe code and a real
kube-apiserver, each GPU's NVLink-C2C with the NICs on its own Grace, and each NIC's role and default route.
The module brings up its own small sandboxes (four GB300 trays of one rack; two GH200 nodes)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gputopo.api.nodetopology import NicRole, NodeTopologyStatus
from gputopo.sandbox.testing import SandboxHandle, running_sandbox
from gputopo.topology import from_status

pytestmark = pytest.mark.integration

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test") + "-gb300"
NODES = 4


@pytest.fixture(scope="module")
def trays() -> Iterator[SandboxHandle]:
    with running_sandbox(NAME, nodes=NODES, profile="gb300") as handle:
        yield handle


def test_every_tray_publishes_c2c_and_nic_roles(trays: SandboxHandle) -> None:
    assert len(trays.nodes) == NODES
    for node in trays.nodes:
        raw = trays.get_json("nodetopology", node)["status"]
        assert [g["c2c"] for g in raw["gpus"]] == [
            {"links": 5, "bandwidthGBps": 223.56, "nics": ["mlx5_0", "mlx5_1", "mlx5_4"]},
            {"links": 5, "bandwidthGBps": 223.56, "nics": ["mlx5_0", "mlx5_1", "mlx5_4"]},
            {"links": 5, "bandwidthGBps": 223.56, "nics": ["mlx5_2", "mlx5_3", "mlx5_5"]},
            {"links": 5, "bandwidthGBps": 223.56, "nics": ["mlx5_2", "mlx5_3", "mlx5_5"]},
        ]
        assert [(n["name"], n["role"], n["defaultRoute"], n["rateGbps"]) for n in raw["nics"]] == [
            ("mlx5_0", "Compute", False, 800.0),
            ("mlx5_1", "Compute", False, 800.0),
            ("mlx5_2", "Compute", False, 800.0),
            ("mlx5_3", "Compute", False, 800.0),
            ("mlx5_4", "FrontEnd", True, 200.0),
            ("mlx5_5", "FrontEnd", False, 200.0),
        ]
        topology = from_status(NodeTopologyStatus.model_validate(raw))
        assert [n.name for n in topology.nics if n.role is NicRole.COMPUTE] == [f"mlx5_{i}" for i in range(4)]
        assert all(g.c2c_links == 5 for g in topology.gpus)


def test_gh200_nodes_publish_four_equidistant_rails() -> None:
    with running_sandbox(NAME.replace("-gb300", "-gh200"), nodes=2, profile="gh200") as handle:
        for node in handle.nodes:
            raw = handle.get_json("nodetopology", node)["status"]
            (gpu,) = raw["gpus"]
            assert gpu["c2c"] == {"links": 10, "bandwidthGBps": 900.0, "nics": [f"mlx5_{i}" for i in range(5)]}
            assert [(n["role"], n["defaultRoute"]) for n in raw["nics"]] == [("Compute", False)] * 4 + [
                ("FrontEnd", True)
            ]
            assert {a["kind"] for n in raw["nics"] for a in n["gpuAffinity"]} == {"NODE"}
