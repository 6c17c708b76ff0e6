"""Fabric info: the health mask decoded, a node's NVLink domain by GPU Feature Discovery's rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputopo.api.nodetopology import FabricHealth, FabricState
from gputopo.topology import from_status, load_node_type, to_status
from gputopo.topology.fabric import fabric_health, health_mask, node_domain
from gputopo.topology.model import ZERO_CLUSTER_UUID, Fabric, Topology

UUID = "5f1c9a3e-0000-4000-8000-000000000072"
OK = Fabric(UUID, 7, FabricState.COMPLETED, 0, health_mask(), 1)


@pytest.mark.parametrize(
    ("fabric", "health", "reason"),
    [
        (None, FabricHealth.HEALTHY, ""),
        (Fabric(), FabricHealth.HEALTHY, ""),
        (OK, FabricHealth.HEALTHY, ""),
        (replace(OK, state=FabricState.IN_PROGRESS), FabricHealth.DOWN, "registration InProgress"),
        (replace(OK, state=FabricState.NOT_STARTED), FabricHealth.DOWN, "registration NotStarted"),
        (replace(OK, status=999), FabricHealth.DOWN, "failed (NVML return 999)"),
        (replace(OK, health_mask=health_mask(degraded_bw=True)), FabricHealth.DEGRADED, "bandwidth degraded"),
        (replace(OK, health_mask=health_mask(route_unhealthy=True)), FabricHealth.DEGRADED, "route unhealthy"),
        (replace(OK, health_mask=health_mask(incorrect_configuration=5)), FabricHealth.DEGRADED, "insufficient NVL"),
        (replace(OK, health_mask=health_mask(gfm_connected=False)), FabricHealth.DEGRADED, "manager disconnected"),
        (replace(OK, health_summary=3), FabricHealth.DEGRADED, "LimitedCapacity"),
        (replace(OK, health_mask=0, health_summary=0), FabricHealth.HEALTHY, ""),  # flags not supported
    ],
    ids=[
        "no-info",
        "not-supported",
        "completed",
        "in-progress",
        "not-started",
        "failed",
        "degraded-bw",
        "route-unhealthy",
        "insufficient-nvlinks",
        "gfm-disconnected",
        "limited-capacity",
        "mask-unsupported",
    ],
)
def test_fabric_health(fabric: Fabric | None, health: FabricHealth, reason: str) -> None:
    got, text = fabric_health(fabric)
    assert got is health
    assert reason in text and (text == "") == (reason == "")


def _tray(*fabrics: Fabric | None) -> Topology:
    t = load_node_type("gb200-tray")
    gpus = tuple(replace(g, fabric=f) for g, f in zip(t.gpus, fabrics, strict=True))
    return Topology(gpus, t.links, t.nics, t.system)


@pytest.mark.parametrize(
    ("fabrics", "clique", "health"),
    [
        ((OK,) * 4, f"{UUID}.7", FabricHealth.HEALTHY),
        ((None,) * 4, "", FabricHealth.HEALTHY),
        ((replace(OK, cluster_uuid=ZERO_CLUSTER_UUID),) * 4, "", FabricHealth.HEALTHY),  # NVLink, no MNNVL
        ((OK, OK, OK, replace(OK, clique_id=8)), "", FabricHealth.DEGRADED),  # disagreeing GPUs: no domain
        ((OK, OK, OK, replace(OK, state=FabricState.IN_PROGRESS)), f"{UUID}.7", FabricHealth.DOWN),
        ((OK, replace(OK, health_mask=health_mask(degraded_bw=True)), OK, OK), f"{UUID}.7", FabricHealth.DEGRADED),
    ],
    ids=["one-clique", "no-fabric", "zero-uuid", "disagree", "one-gpu-registering", "one-gpu-degraded"],
)
def test_node_domain(fabrics: tuple[Fabric | None, ...], clique: str, health: FabricHealth) -> None:
    t = _tray(*fabrics)
    domain = node_domain(t)
    assert (domain.clique, domain.health) == (clique, health)
    assert from_status(to_status(t)) == t
    status = to_status(t).system.nvlink_domain
    assert (status is None) == all(f is None for f in fabrics)
    if status is not None:
        assert (status.clique, status.health) == (clique, health)
