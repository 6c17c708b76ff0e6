"""The sandbox's fake DRA driver: the slice NVIDIA's driver would publish for a node, and when it is rewritten."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gputopo.api.nodetopology import GpuHealthState
from gputopo.control.dra import slice_facts
from gputopo.topology.catalog import load_node_type
from gputopo.topology.model import Topology
from gputopo_probe.fake.dra import FakeDraDriver, driver_version, resource_slice


def with_uuids(topology: Topology) -> Topology:
    gpus = tuple(
        replace(g, uuid=f"GPU-{g.index:08x}-0000", pci_bus_id=f"0000:{0x18 + g.index:02X}:00.0", memory_mib=81559)
        for g in topology.gpus
    )
    return Topology(gpus, topology.links, topology.nics, topology.system)


class Writer:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def apply_resource_slice(self, body: dict[str, Any]) -> None:
        self.bodies.append(body)


def test_one_device_per_gpu_with_the_drivers_attributes() -> None:
    topology = with_uuids(load_node_type("hgx-h100"))
    body = resource_slice("n1", "uid-n1", topology, 1)
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        "gpu.nvidia.com",
        "n1",
        {"name": "n1", "generation": 1, "resourceSliceCount": 1},
    )
    first = spec["devices"][0]
    assert first["name"] == "gpu-0"
    assert first["attributes"]["type"] == {"string": "gpu"}
    assert first["attributes"]["uuid"] == {"string": "GPU-00000000-0000"}
    assert first["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert first["capacity"] == {"memory": {"value": "81559Mi"}}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    # What the operator reads back: every GPU, by UUID, on this node.
    facts = slice_facts(body)
    assert [(d.node, d.uuid) for d in facts.devices] == [("n1", g.uuid) for g in topology.gpus]


VERSIONS = [
    ("strict-already", "550.54.15", "550.54.15"),
    ("leading-zero-patch", "570.158.01", "570.158.1"),
    ("two-parts", "550.54", "550.54.0"),
    ("one-part", "560", "560.0.0"),
    ("not-a-version", "unknown", None),
    ("four-parts", "1.2.3.4", None),
    ("empty", "", None),
]


@pytest.mark.parametrize(("case", "nvml", "published"), VERSIONS, ids=[c[0] for c in VERSIONS])
def test_the_driver_version_is_published_as_strict_semver(case: str, nvml: str, published: str | None) -> None:
    """The API server rejects a whole slice whose version attribute is not strict semver (no leading zeros)."""
    assert driver_version(nvml) == published
    topology = with_uuids(load_node_type("hgx-h100"))
    topology = Topology(topology.gpus, topology.links, topology.nics, replace(topology.system, driver_version=nvml))
    attributes = resource_slice("n1", "", topology, 1)["spec"]["devices"][0]["attributes"]
    assert attributes.get("driverVersion") == ({"version": published} if published else None)


WITHDRAWN = [
    ("unhealthy-gpu", lambda t: t.with_gpu_health(3, GpuHealthState.UNHEALTHY, "XID 79"), {3}),
    ("gpu-without-uuid", lambda t: Topology(
        tuple(replace(g, uuid="") if g.index == 5 else g for g in t.gpus), t.links, t.nics, t.system), {5}),
    ("all-healthy", lambda t: t, set()),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "missing"), WITHDRAWN, ids=[c[0] for c in WITHDRAWN])
def test_a_gpu_the_driver_cannot_offer_is_withdrawn(case: str, change: Any, missing: set[int]) -> None:
    topology = change(with_uuids(load_node_type("hgx-h100")))
    names = {d["name"] for d in resource_slice("n1", "", topology, 1)["spec"]["devices"]}
    assert names == {f"gpu-{i}" for i in range(8)} - {f"gpu-{i}" for i in missing}, case


def test_the_slice_is_rewritten_with_a_new_generation_only_when_its_devices_change() -> None:
    writer = Writer()
    driver = FakeDraDriver(writer)
    healthy = with_uuids(load_node_type("hgx-h100"))
    driver.publish("n1", "uid", healthy)
    driver.publish("n1", "uid", healthy)
    assert len(writer.bodies) == 1
    driver.publish("n1", "uid", healthy.with_gpu_health(2, GpuHealthState.UNHEALTHY, "XID 79"))
    driver.publish("n1", "uid", healthy)
    assert [b["spec"]["pool"]["generation"] for b in writer.bodies] == [1, 2, 3]
    assert [len(b["spec"]["devices"]) for b in writer.bodies] == [8, 7, 8]


def test_an_unchanged_slice_is_written_again_after_reassert_seconds_with_the_same_generation() -> None:
    """A real kubelet wipes its node's slices when it starts; the driver puts them back."""
    now = [100.0]
    writer = Writer()
    driver = FakeDraDriver(writer, reassert_s=10.0, clock=lambda: now[0])
    topology = with_uuids(load_node_type("hgx-h100"))
    for t in (100.0, 105.0, 109.9):
        now[0] = t
        driver.publish("n1", "uid", topology)
    assert len(writer.bodies) == 1
    now[0] = 110.0
    driver.publish("n1", "uid", topology)
    assert len(writer.bodies) == 2 and writer.bodies[1] == resource_slice("n1", "uid", topology, 1)
