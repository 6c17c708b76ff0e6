"""Multi-node NVLink fabric info: a fake NVL72 tray discovers as a real one would, faults turn into degraded
health with a reason, and the clique labels follow GPU Feature Discovery's (never overwriting its label)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ProbeFactory
from test_probe_publisher import Clock, RecordingKube

from gputopo.api.labels import LABEL_GFD_CLIQUE, LABEL_HEALTH, LABEL_NVLINK_CLIQUE
from gputopo.api.nodetopology import FabricHealth, FabricState, GpuHealthState, NodeTopologyStatus
from gputopo.topology.catalog import load_node_type
from gputopo.topology.fabric import with_fabric
from gputopo_probe.discovery.fabric import read_fabric
from gputopo_probe.nvml import Nvml
from gputopo_probe.publish.labels import node_labels
from gputopo_probe.publish.publisher import Publisher

UUID = "0c7a1f52-3b6e-4d2a-9f00-000000000007"
CLIQUE = f"{UUID}.1"


def tray() -> Any:
    return with_fabric(load_node_type("gb200-tray"), UUID, 1)


def test_a_fake_tray_discovers_its_fabric(fake_probe: ProbeFactory) -> None:
    probe, _, _ = fake_probe(tray())
    poll = probe.poll()
    assert [g.fabric for g in poll.topology.gpus] == [g.fabric for g in tray().gpus]
    status = poll.status()
    assert status.system.nvlink_domain is not None
    assert (status.system.nvlink_domain.clique, status.system.nvlink_domain.health) == (CLIQUE, FabricHealth.HEALTHY)
    fabric = status.gpus[0].fabric
    assert fabric is not None and fabric.state is FabricState.COMPLETED and fabric.health_summary == "Healthy"
    labels = node_labels(poll.topology)
    assert labels[LABEL_NVLINK_CLIQUE] == labels[LABEL_GFD_CLIQUE] == CLIQUE


def test_the_deprecated_call_serves_older_drivers(fake_probe: ProbeFactory) -> None:
    _, node, _ = fake_probe(tray())
    node.nvml.unsupported.add("nvmlDeviceGetGpuFabricInfoV")
    fabric = read_fabric(Nvml(node.nvml), node.nvml.devices[0])
    assert fabric is not None and fabric.clique_id == 1 and fabric.health_mask == 0


def test_no_fabric_no_clique(fake_probe: ProbeFactory) -> None:
    probe, _, _ = fake_probe(load_node_type("gb200-tray"))
    poll = probe.poll()
    assert all(g.fabric is None for g in poll.topology.gpus)
    assert poll.status().system.nvlink_domain is None
    assert LABEL_NVLINK_CLIQUE not in node_labels(poll.topology)


@pytest.mark.parametrize(
    ("fault", "reason", "clique"),
    [("degraded", "NVLink fabric bandwidth degraded", CLIQUE), ("down", "registration NotStarted", "")],
    ids=["degraded-bandwidth", "fabric-down"],
)
def test_a_fabric_fault_is_degraded_health_with_a_reason(
    fake_probe: ProbeFactory, fault: str, reason: str, clique: str
) -> None:
    probe, _, store = fake_probe(tray(), down_after=2, up_after=2)
    probe.poll()
    store.fabric("node-1", fault)  # type: ignore[arg-type]
    first = probe.poll()
    assert all(g.health is GpuHealthState.HEALTHY for g in first.topology.gpus), "one reading is not a fault"
    poll = probe.poll()
    assert all(g.health is GpuHealthState.DEGRADED and reason in g.health_reason for g in poll.topology.gpus)
    status = poll.status()
    domain = status.system.nvlink_domain
    assert domain is not None and domain.health is not FabricHealth.HEALTHY and reason in domain.reason
    labels = node_labels(poll.topology)
    assert labels[LABEL_HEALTH] == "degraded"
    assert labels.get(LABEL_NVLINK_CLIQUE, "") == clique
    assert any(t.subject == "gpu 0" and t.new == "Degraded" for t in poll.transitions)
    store.fabric("node-1", "up")
    probe.poll()
    healed = probe.poll()
    assert all(g.health is GpuHealthState.HEALTHY for g in healed.topology.gpus)
    assert node_labels(healed.topology)[LABEL_NVLINK_CLIQUE] == CLIQUE


@pytest.mark.parametrize(
    ("foreign", "expected_gfd", "expected_own"),
    [({}, CLIQUE, CLIQUE), ({LABEL_GFD_CLIQUE: CLIQUE}, None, CLIQUE), ({LABEL_GFD_CLIQUE: "gfd.9"}, None, "gfd.9")],
    ids=["probe-writes-both", "gfd-owns-it", "gfd-wins-a-disagreement"],
)
def test_gfd_clique_label_is_read_never_fought(
    fake_probe: ProbeFactory, foreign: dict[str, str], expected_gfd: str | None, expected_own: str
) -> None:
    probe, _, _ = fake_probe(tray(), down_after=1, up_after=1)
    kube = RecordingKube()
    kube.foreign = foreign
    publisher = Publisher(kube, "node-1", clock=Clock())
    assert publisher.publish(probe.poll())
    written = kube.labels[-1]
    assert written.get(LABEL_GFD_CLIQUE) == expected_gfd
    assert written[LABEL_NVLINK_CLIQUE] == expected_own
    NodeTopologyStatus.model_validate(kube.statuses[-1])
