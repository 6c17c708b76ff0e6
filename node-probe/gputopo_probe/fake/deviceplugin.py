"""A device plugin that advertises a fake node's GPUs to a real kubelet as ``nvidia.com/gpu``.

On a test cluster (kind) this lets a real kubelet admit GPU pods and choose their GPUs the way it does with
NVIDIA's device plugin: device ids are GPU UUIDs, a GPU with an XID is Unhealthy, GetPreferredAllocation
follows that plugin's best-effort policy as the operator models it (``gputopo.topology.device_plugin``;
pod identity is not part of the request, so no plan can be honoured here), and Allocate hands each
container its GPUs in environment variables: NVIDIA_VISIBLE_DEVICES (UUIDs, as NVIDIA's plugin sets it)
and GPUTOPO_VISIBLE_GPUS (indices). The kubelet's PodResources API then
reports the kubelet's choice, which the probe publishes.

The kubelet deletes every socket in its plugin directory when it restarts; the plugin notices its socket is
gone and serves and registers again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Final

import grpc

from gputopo.api.group import GPU_RESOURCE
from gputopo.topology.device_plugin import preferred_allocation
from gputopo.topology.model import Topology
from gputopo_probe.deviceplugin import deviceplugin_pb2 as pb

__all__ = ["DEFAULT_PLUGIN_DIR", "ENV_INDICES", "ENV_UUIDS", "FakeDevicePlugin", "unary"]

log = logging.getLogger(__name__)

DEFAULT_PLUGIN_DIR: Final = "/var/lib/kubelet/device-plugins"
API_VERSION: Final = "v1beta1"
ENV_UUIDS: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_INDICES: Final = "GPUTOPO_VISIBLE_GPUS"
_HEALTHY: Final = "Healthy"
_UNHEALTHY: Final = "Unhealthy"


class FakeDevicePlugin:
    """Serve on ``<plugin_dir>/<socket_name>`` and register with the kubelet's ``kubelet.sock`` there.

    ``unhealthy()`` names the GPU indices to report Unhealthy; it is read every ``poll_s`` seconds.
    """

    def __init__(
        self,
        topology: Topology,
        unhealthy: Callable[[], set[int]],
        *,
        plugin_dir: str | Path = DEFAULT_PLUGIN_DIR,
        socket_name: str = "gputopo-fake-gpu.sock",
        resource: str = GPU_RESOURCE,
        poll_s: float = 1.0,
    ) -> None:
        self.topology = topology
        self.unhealthy = unhealthy
        self.plugin_dir = Path(plugin_dir)
        self.socket_name = socket_name
        self.resource = resource
        self.poll_s = poll_s
        self.uuids = [gpu.uuid or f"GPU-fake-{gpu.index}" for gpu in topology.gpus]
        self._index = {uuid: i for i, uuid in enumerate(self.uuids)}
        self._changed = threading.Condition()
        self._health: frozenset[int] = frozenset()
        self._version = 0
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None
        self._thread: threading.Thread | None = None
        self.registrations = 0

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.socket_name

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> FakeDevicePlugin:
        self._thread = threading.Thread(target=self._run, name="fake-device-plugin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread:
            self._thread.join(timeout=5)
        self._stop_server()

    def _run(self) -> None:
        registered = False
        while not self._stopped.is_set():
            try:
                self._refresh_health()
                if self._server is None or not self.socket.exists():
                    self._serve()
                    registered = False
                if not registered:
                    self._register()
                    registered = True
            except (grpc.RpcError, OSError, RuntimeError) as error:
                log.warning("device plugin: %s; retrying", error)
            self._stopped.wait(self.poll_s)

    def _serve(self) -> None:
        self._stop_server()
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="device-plugin"))
        server.add_generic_rpc_handlers((self._handlers(),))
        if not server.add_insecure_port(f"unix://{self.socket}"):
            raise OSError(f"cannot listen on {self.socket}")
        server.start()
        self._server = server
        log.info("device plugin serving %d GPUs as %s on %s", len(self.uuids), self.resource, self.socket)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def _register(self) -> None:
        kubelet = self.plugin_dir / "kubelet.sock"
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            register = channel.unary_unary(
                "/v1beta1.Registration/Register",
                request_serializer=pb.RegisterRequest.SerializeToString,
                response_deserializer=pb.Empty.FromString,
            )
            register(
                pb.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket_name,
                    resource_name=self.resource,
                    options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=5,
            )
        self.registrations += 1
        log.info("device plugin registered with the kubelet at %s", kubelet)

    def _refresh_health(self) -> None:
        health = frozenset(self.unhealthy())
        if health != self._health:
            with self._changed:
                self._health = health
                self._version += 1
                self._changed.notify_all()

    # -- the DevicePlugin service -------------------------------------------------------------------------------
    def devices(self) -> pb.ListAndWatchResponse:
        out = pb.ListAndWatchResponse()
        for gpu, uuid in zip(self.topology.gpus, self.uuids, strict=True):
            device = out.devices.add(ID=uuid, health=_UNHEALTHY if gpu.index in self._health else _HEALTHY)
            if gpu.numa_node is not None and gpu.numa_node >= 0:
                device.topology.nodes.add(ID=gpu.numa_node)
        return out

    def list_and_watch(self, _request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        seen = -1
        while context.is_active() and not self._stopped.is_set():
            with self._changed:
                if seen == self._version:
                    self._changed.wait(timeout=self.poll_s)
                    continue
                seen = self._version
                response = self.devices()
            yield response

    def preferred_allocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        out = pb.PreferredAllocationResponse()
        for want in request.container_requests:
            available = {self._index[d] for d in want.available_deviceIDs if d in self._index}
            must = {self._index[d] for d in want.must_include_deviceIDs if d in self._index}
            chosen = preferred_allocation(self.topology, available, want.allocation_size, must)
            if any(g is None for g in chosen):
                # NVIDIA's plugin reads the UUID of the padding slot and fails; so does this one.
                context.abort(grpc.StatusCode.INTERNAL, "best-effort policy returned a padding slot")
            out.container_responses.add(deviceIDs=[self.uuids[g] for g in sorted(g for g in chosen if g is not None)])
        return out

    def allocate(self, request: pb.AllocateRequest, _context: grpc.ServicerContext) -> pb.AllocateResponse:
        out = pb.AllocateResponse()
        for want in request.container_requests:
            indices = sorted(self._index[d] for d in want.devices_ids if d in self._index)
            response = out.container_responses.add()
            response.envs[ENV_UUIDS] = ",".join(self.uuids[i] for i in indices)
            response.envs[ENV_INDICES] = ",".join(str(i) for i in indices)
        return out

    def _handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "v1beta1.DevicePlugin",
            {
                "GetDevicePluginOptions": unary(
                    lambda _r, _c: pb.DevicePluginOptions(get_preferred_allocation_available=True),
                    pb.Empty,
                    pb.DevicePluginOptions,
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary(
                    self.preferred_allocation, pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
                ),
                "Allocate": unary(self.allocate, pb.AllocateRequest, pb.AllocateResponse),
                "PreStartContainer": unary(
                    lambda _r, _c: pb.PreStartContainerResponse(),
                    pb.PreStartContainerRequest,
                    pb.PreStartContainerResponse,
                ),
            },
        )


def unary(fn: Callable[[Any, grpc.ServicerContext], Any], request: Any, response: Any) -> grpc.RpcMethodHandler:
    """A unary gRPC method served by ``fn``, its messages (de)serialised by the protobuf classes given."""
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=request.FromString, response_serializer=response.SerializeToString
    )
