"""The fake device plugin against a kubelet's side of the device plugin API, over real gRPC on unix sockets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from probe_builders import hgx, pairs_board

from gputopo.topology.model import Topology
from gputopo_probe.deviceplugin import deviceplugin_pb2 as pb
from gputopo_probe.fake.deviceplugin import ENV_INDICES, ENV_UUIDS, FakeDevicePlugin

DEADLINE_S = 10.0


class Kubelet:
    """The kubelet's Registration service, and a client of the plugin it registered."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.requests: list[pb.RegisterRequest] = []
        self.registered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._register,
            request_deserializer=pb.RegisterRequest.FromString,
            response_serializer=pb.Empty.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("v1beta1.Registration", {"Register": handler})]
        )
        self.server.add_insecure_port(f"unix://{plugin_dir / 'kubelet.sock'}")
        self.server.start()

    def _register(self, request: pb.RegisterRequest, _context: Any) -> pb.Empty:
        self.requests.append(request)
        self.registered.set()
        return pb.Empty()

    def call(self, method: str, request: Any, response: Any) -> Any:
        endpoint = self.plugin_dir / self.requests[-1].endpoint
        with grpc.insecure_channel(f"unix://{endpoint}") as channel:
            rpc = channel.unary_unary(
                f"/v1beta1.DevicePlugin/{method}",
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )
            return rpc(request, timeout=DEADLINE_S)

    def watch(self) -> tuple[grpc.Channel, Iterator[pb.ListAndWatchResponse]]:
        endpoint = self.plugin_dir / self.requests[-1].endpoint
        channel = grpc.insecure_channel(f"unix://{endpoint}")
        rpc = channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=pb.Empty.SerializeToString,
            response_deserializer=pb.ListAndWatchResponse.FromString,
        )
        return channel, rpc(pb.Empty(), timeout=DEADLINE_S)


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Kubelet]:
    side = Kubelet(tmp_path)
    yield side
    side.server.stop(None)


def started(kubelet: Kubelet, topology: Topology, unhealthy: set[int] | None = None) -> FakeDevicePlugin:
    bad = unhealthy if unhealthy is not None else set()
    plugin = FakeDevicePlugin(topology, lambda: set(bad), plugin_dir=kubelet.plugin_dir, poll_s=0.05).start()
    assert kubelet.registered.wait(DEADLINE_S), "the plugin never registered"
    return plugin


def test_registers_as_nvidia_gpu_with_preferred_allocation(kubelet: Kubelet) -> None:
    plugin = started(kubelet, hgx())
    try:
        request = kubelet.requests[0]
        assert (request.version, request.resource_name, request.endpoint) == (
            "v1beta1",
            "nvidia.com/gpu",
            "gputopo-fake-gpu.sock",
        )
        assert request.options.get_preferred_allocation_available
        options = kubelet.call("GetDevicePluginOptions", pb.Empty(), pb.DevicePluginOptions)
        assert options.get_preferred_allocation_available and not options.pre_start_required
    finally:
        plugin.stop()


def test_list_and_watch_reports_each_gpu_and_follows_its_health(kubelet: Kubelet) -> None:
    bad: set[int] = set()
    topology = hgx()
    plugin = started(kubelet, topology, bad)
    channel, stream = kubelet.watch()
    try:
        first = next(stream)
        assert [d.ID for d in first.devices] == plugin.uuids
        assert {d.health for d in first.devices} == {"Healthy"}
        assert [d.topology.nodes[0].ID for d in first.devices] == [g.numa_node for g in topology.gpus]
        bad.add(3)
        second = next(stream)
        assert [d.health for d in second.devices] == ["Unhealthy" if i == 3 else "Healthy" for i in range(8)]
    finally:
        channel.close()
        plugin.stop()


@pytest.mark.parametrize(
    ("topology", "available", "must", "size", "expected"),
    [
        pytest.param(pairs_board(4), [0, 1, 2, 3], [], 2, [0, 1], id="bridged-pair-first"),
        pytest.param(pairs_board(4), [1, 2, 3], [], 2, [2, 3], id="the-free-bridged-pair"),
        pytest.param(pairs_board(4), [0, 1, 2, 3], [3], 2, [2, 3], id="must-include-takes-its-partner"),
        pytest.param(hgx(), list(range(8)), [], 4, [0, 1, 2, 3], id="nvswitch-lowest-indices"),
        pytest.param(hgx(), [5, 6, 7], [], 1, [5], id="single-gpu"),
    ],
)
def test_preferred_allocation_is_the_device_plugins_best_effort(
    kubelet: Kubelet, topology: Topology, available: list[int], must: list[int], size: int, expected: list[int]
) -> None:
    plugin = started(kubelet, topology)
    try:
        ids = plugin.uuids
        request = pb.PreferredAllocationRequest()
        request.container_requests.add(
            available_deviceIDs=[ids[i] for i in available],
            must_include_deviceIDs=[ids[i] for i in must],
            allocation_size=size,
        )
        answer = kubelet.call("GetPreferredAllocation", request, pb.PreferredAllocationResponse)
        assert list(answer.container_responses[0].deviceIDs) == [ids[i] for i in expected]
    finally:
        plugin.stop()


def test_allocate_hands_the_container_its_gpus(kubelet: Kubelet) -> None:
    plugin = started(kubelet, hgx())
    try:
        ids = plugin.uuids
        request = pb.AllocateRequest()
        request.container_requests.add(devices_ids=[ids[6], ids[2]])
        request.container_requests.add(devices_ids=[ids[0]])
        answer = kubelet.call("Allocate", request, pb.AllocateResponse)
        envs = [dict(c.envs) for c in answer.container_responses]
        assert envs == [
            {ENV_UUIDS: f"{ids[2]},{ids[6]}", ENV_INDICES: "2,6"},
            {ENV_UUIDS: ids[0], ENV_INDICES: "0"},
        ]
    finally:
        plugin.stop()


def test_registers_again_when_the_kubelet_removes_its_socket(kubelet: Kubelet) -> None:
    plugin = started(kubelet, hgx())
    try:
        plugin.socket.unlink()  # what a restarting kubelet does to every plugin socket
        wait_until("a second registration", lambda: plugin.registrations >= 2)
        assert plugin.socket.exists()
        options = kubelet.call("GetDevicePluginOptions", pb.Empty(), pb.DevicePluginOptions)
        assert options.get_preferred_allocation_available
    finally:
        plugin.stop()
