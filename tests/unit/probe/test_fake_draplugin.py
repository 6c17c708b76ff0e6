"""The fake DRA kubelet plugin against the kubelet's side of the registration and DRA APIs, over real gRPC.

The kubelet's plugin watcher calls GetInfo on the registration socket and NotifyRegistrationStatus; the DRA
manager calls NodePrepareResources / NodeUnprepareResources with claim identities only. The claims here are
plain data as the API server returns them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from gputopo.topology.catalog import load_node_type
from gputopo.topology.model import Topology
from gputopo_probe.draplugin import dra_pb2 as dra
from gputopo_probe.draplugin import pluginregistration_pb2 as reg
from gputopo_probe.errors import ApiError
from gputopo_probe.fake.draplugin import FakeDraPlugin

NODE = "n1"
DEADLINE_S = 10.0


def topology() -> Topology:
    gpus = tuple(replace(g, uuid=f"GPU-{g.index:08x}-0000") for g in load_node_type("hgx-h100").gpus)
    base = load_node_type("hgx-h100")
    return Topology(gpus, base.links, base.nics, base.system)


def claim(name: str, uid: str, devices: list[str] | None, *, pool: str = NODE, driver: str = "gpu.nvidia.com") -> dict:
    status: dict[str, Any] = {}
    if devices is not None:
        results = [{"request": "gpus", "driver": driver, "pool": pool, "device": d} for d in devices]
        status = {"allocation": {"devices": {"results": results}}}
    return {"metadata": {"namespace": "ml", "name": name, "uid": uid}, "status": status}


class Claims:
    """The API server's answers, by (namespace, name); an ApiError stands for the server failing."""

    def __init__(self, *claims: dict[str, Any] | ApiError) -> None:
        self.by_name: dict[tuple[str, str], dict[str, Any] | ApiError] = {}
        for c in claims:
            key = ("ml", c.what) if isinstance(c, ApiError) else ("ml", c["metadata"]["name"])
            self.by_name[key] = c

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.by_name.get((namespace, name))
        if isinstance(found, ApiError):
            raise found
        return found


def call(socket: Path, service: str, method: str, request: Any, response: Any) -> Any:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        rpc = channel.unary_unary(
            f"/{service}/{method}",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        return rpc(request, timeout=DEADLINE_S)


def prepare(plugin: FakeDraPlugin, *claims: tuple[str, str]) -> dra.NodePrepareResourcesResponse:
    request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ml", name=n, uid=u) for n, u in claims])
    service = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    return call(plugin.socket, service, "NodePrepareResources", request, dra.NodePrepareResourcesResponse)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., FakeDraPlugin]]:
    plugins: list[FakeDraPlugin] = []

    def start(*claims: dict[str, Any] | ApiError) -> FakeDraPlugin:
        plugin = FakeDraPlugin(
            NODE,
            topology(),
            Claims(*claims),
            plugins_dir=tmp_path / "plugins",
            registry_dir=tmp_path / "plugins_registry",
            cdi_dir=tmp_path / "cdi",
            poll_s=0.05,
        ).start()
        plugins.append(plugin)
        return plugin

    yield start
    for plugin in plugins:
        plugin.stop()


def test_registration_names_the_driver_its_absolute_endpoint_and_v1(started: Callable[..., FakeDraPlugin]) -> None:
    plugin = started()
    assert plugin.registration_socket.name == "gpu.nvidia.com-reg.sock"
    info = call(plugin.registration_socket, "pluginregistration.Registration", "GetInfo", reg.InfoRequest(),
                reg.PluginInfo)  # fmt: skip
    assert (info.type, info.name, list(info.supported_versions)) == ("DRAPlugin", "gpu.nvidia.com", ["v1.DRAPlugin"])
    assert info.endpoint == str(plugin.socket) and Path(info.endpoint).is_absolute()
    assert info.endpoint.endswith("/plugins/gpu.nvidia.com/dra.sock")
    for registered, error in ((False, "no such driver"), (True, "")):
        status = reg.RegistrationStatus(plugin_registered=registered, error=error)
        call(plugin.registration_socket, "pluginregistration.Registration", "NotifyRegistrationStatus", status,
             reg.RegistrationStatusResponse)  # fmt: skip
        assert (plugin.registered, plugin.registration_error) == (registered, error)


def test_prepare_writes_a_cdi_spec_with_the_claims_gpus_and_unprepare_removes_it(
    started: Callable[..., FakeDraPlugin],
) -> None:
    plugin = started(claim("rank0", "uid-0", ["gpu-5", "gpu-1"]))
    answer = prepare(plugin, ("rank0", "uid-0")).claims["uid-0"]
    assert answer.error == ""
    # In the allocation's order; the spec lists the GPUs by index.
    assert [(d.pool_name, d.device_name) for d in answer.devices] == [(NODE, "gpu-5"), (NODE, "gpu-1")]
    assert [list(d.cdi_device_ids) for d in answer.devices] == [["k8s.gpu.nvidia.com/claim=uid-0"], []]
    (spec_file,) = plugin.cdi_dir.iterdir()
    spec = json.loads(spec_file.read_text())
    assert (spec["kind"], spec["devices"][0]["name"]) == ("k8s.gpu.nvidia.com/claim", "uid-0")
    assert spec["devices"][0]["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=GPU-00000001-0000,GPU-00000005-0000",
        "GPUTOPO_VISIBLE_GPUS=1,5",
    ]
    request = dra.NodeUnprepareResourcesRequest(claims=[dra.Claim(namespace="ml", name="rank0", uid="uid-0")])
    service = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    done = call(plugin.socket, service, "NodeUnprepareResources", request, dra.NodeUnprepareResourcesResponse)
    assert list(done.claims) == ["uid-0"] and done.claims["uid-0"].error == ""
    assert not list(plugin.cdi_dir.iterdir())


@pytest.mark.parametrize(
    ("claims", "wanted"),
    [
        pytest.param([], "ResourceClaim ml/rank0 does not exist", id="claim-gone"),
        pytest.param([claim("rank0", "uid-old", ["gpu-0"])], "has UID 'uid-old'", id="claim-recreated"),
        pytest.param([claim("rank0", "uid-0", None)], "is not allocated", id="not-allocated"),
        pytest.param(
            [claim("rank0", "uid-0", ["gpu-0"], pool="n2")], "of pool n2, not of this node n1", id="other-node"
        ),
        pytest.param(
            [claim("rank0", "uid-0", ["gpu-9"])], "device gpu-9, which node n1 does not have", id="unknown-device"
        ),
        pytest.param([ApiError("rank0", 503, "Service Unavailable")], "HTTP 503", id="api-server-down"),
    ],
)
def test_a_claim_that_cannot_be_prepared_gets_its_own_error_and_the_others_are_prepared(
    started: Callable[..., FakeDraPlugin], claims: list[dict[str, Any] | ApiError], wanted: str
) -> None:
    plugin = started(*claims, claim("fine", "uid-1", ["gpu-3"]))
    answer = prepare(plugin, ("rank0", "uid-0"), ("fine", "uid-1"))
    assert set(answer.claims) == {"uid-0", "uid-1"}, "every claim asked for has an answer"
    assert wanted in answer.claims["uid-0"].error and not answer.claims["uid-0"].devices
    assert answer.claims["uid-1"].error == "" and [d.device_name for d in answer.claims["uid-1"].devices] == ["gpu-3"]
    assert [p.name for p in plugin.cdi_dir.iterdir()] == ["k8s.gpu.nvidia.com-claim_uid-1.json"]


def test_other_drivers_devices_are_not_this_plugins_to_prepare(started: Callable[..., FakeDraPlugin]) -> None:
    plugin = started(claim("nic", "uid-0", ["mlx5-0"], driver="rdma.example.com"))
    answer = prepare(plugin, ("nic", "uid-0")).claims["uid-0"]
    assert answer.error == "" and not answer.devices
    assert not plugin.cdi_dir.exists() or not list(plugin.cdi_dir.iterdir())


def test_a_removed_socket_is_served_again(started: Callable[..., FakeDraPlugin]) -> None:
    plugin = started(claim("rank0", "uid-0", ["gpu-2"]))
    for socket in (plugin.socket, plugin.registration_socket):
        socket.unlink()
    deadline = time.monotonic() + DEADLINE_S
    while not (plugin.socket.exists() and plugin.registration_socket.exists()):
        assert time.monotonic() < deadline, "the sockets were not served again"
        time.sleep(0.02)
    assert prepare(plugin, ("rank0", "uid-0")).claims["uid-0"].error == ""
