"""A DRA kubelet plugin for a fake node's GPUs, registered with a real kubelet as the driver ``gpu.nvidia.com``.

On a test cluster (kind) this lets a real kubelet run pods whose GPUs kube-scheduler allocated from the node's
ResourceSlice (published by the probe, gputopo_probe.fake.dra), the way NVIDIA's DRA driver does it:

* registration (k8s.io/kubelet ``pluginregistration/v1``): a socket ``<driver>-reg.sock`` in the kubelet's
  plugin registry directory answers GetInfo with type ``DRAPlugin``, the driver's name, the absolute path of
  its DRA socket and the services it serves (``v1.DRAPlugin``), and takes NotifyRegistrationStatus;
* ``v1.DRAPlugin`` on ``<plugins dir>/<driver>/dra.sock``: NodePrepareResources receives only the claims'
  identities, so the plugin reads each ResourceClaim, takes the devices its allocation gives this driver in
  this node's pool, and writes a CDI spec that hands the container their indices and UUIDs
  (gputopo_probe.fake.cdi); NodeUnprepareResources removes it. A claim that cannot be prepared (gone, another
  UID, not allocated, a device the node does not have) gets an error of its own; the kubelet retries it.

If a socket disappears (the kubelet's or the pod's directory was cleaned), the plugin serves it again, and the
kubelet's plugin watcher registers it anew.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path
from typing import Any, Final, Protocol

import grpc

from gputopo.api.group import DRA_DRIVER
from gputopo.topology.model import Gpu, Topology
from gputopo_probe.draplugin import dra_pb2 as dra
from gputopo_probe.draplugin import pluginregistration_pb2 as reg
from gputopo_probe.errors import ProbeError
from gputopo_probe.fake.cdi import DEFAULT_CDI_DIR, claim_device_id, remove_spec, write_spec
from gputopo_probe.fake.deviceplugin import unary
from gputopo_probe.fake.dra import device_name

__all__ = [
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "ClaimReader",
    "FakeDraPlugin",
    "PrepareError",
    "claim_gpus",
]

log = logging.getLogger(__name__)

DEFAULT_PLUGINS_DIR: Final = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR: Final = "/var/lib/kubelet/plugins_registry"
PLUGIN_TYPE: Final = "DRAPlugin"
SERVICE: Final = "v1.DRAPlugin"
_DRA_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
_REGISTRATION_SERVICE: Final = "pluginregistration.Registration"


class ClaimReader(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim, or None when there is none of that name."""


class PrepareError(ProbeError):
    """Why one claim cannot be prepared on this node."""


def claim_gpus(claim: Mapping[str, Any], uid: str, node: str, gpus_by_device: Mapping[str, Gpu]) -> list[Gpu]:
    """The GPUs of this node that ``claim``'s allocation gives this driver; PrepareError when it cannot be used.

    Pure: the claim as the API server returns it, the node's pool name (its node name, as NVIDIA's driver
    names it) and the node's devices by name.
    """
    meta = claim.get("metadata") or {}
    where = f"ResourceClaim {meta.get('namespace', '')}/{meta.get('name', '')}"
    if meta.get("uid") != uid:
        raise PrepareError(f"{where} has UID {meta.get('uid')!r}, the kubelet asked for {uid!r}")
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    if not allocation or not isinstance(results, list):
        raise PrepareError(f"{where} is not allocated")
    out: list[Gpu] = []
    for result in results:
        if not isinstance(result, Mapping) or result.get("driver") != DRA_DRIVER:
            continue
        if result.get("pool") != node:
            raise PrepareError(f"{where} is allocated device {result.get('device')} of pool {result.get('pool')}, "
                               f"not of this node {node}")  # fmt: skip
        gpu = gpus_by_device.get(str(result.get("device")))
        if gpu is None:
            raise PrepareError(f"{where} is allocated device {result.get('device')}, which node {node} does not have")
        out.append(gpu)
    return out


class FakeDraPlugin:
    """Serve the DRA socket and the registration socket, and keep them served until ``stop``."""

    def __init__(
        self,
        node: str,
        topology: Topology,
        claims: ClaimReader,
        *,
        plugins_dir: str | Path = DEFAULT_PLUGINS_DIR,
        registry_dir: str | Path = DEFAULT_REGISTRY_DIR,
        cdi_dir: str | Path = DEFAULT_CDI_DIR,
        poll_s: float = 1.0,
    ) -> None:
        self.node = node
        self.claims = claims
        self.socket = Path(plugins_dir) / DRA_DRIVER / "dra.sock"
        self.registration_socket = Path(registry_dir) / f"{DRA_DRIVER}-reg.sock"
        self.cdi_dir = Path(cdi_dir)
        self.poll_s = poll_s
        self.gpus_by_device = {device_name(g): g for g in topology.gpus if g.uuid}
        self.registered: bool | None = None  # what the kubelet last said; None before it said anything
        self.registration_error = ""
        self._stopped = threading.Event()
        self._servers: dict[Path, grpc.Server] = {}
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> FakeDraPlugin:
        self._ensure_served()  # both sockets exist when start returns; the thread keeps them there
        self._thread = threading.Thread(target=self._run, name="fake-dra-plugin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread:
            self._thread.join(timeout=5)
        for socket in list(self._servers):
            self._stop_server(socket)

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_s):
            try:
                self._ensure_served()
            except (OSError, RuntimeError) as error:
                log.warning("DRA plugin: %s; retrying", error)

    def _ensure_served(self) -> None:
        for socket, handler in ((self.socket, self._dra_handler), (self.registration_socket, self._reg_handler)):
            if socket not in self._servers or not socket.exists():
                self._serve(socket, handler())

    def _serve(self, socket: Path, handler: grpc.GenericRpcHandler) -> None:
        self._stop_server(socket)
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="dra-plugin"))
        server.add_generic_rpc_handlers((handler,))
        if not server.add_insecure_port(f"unix://{socket}"):
            raise OSError(f"cannot listen on {socket}")
        server.start()
        self._servers[socket] = server
        log.info("DRA plugin %s serving on %s", DRA_DRIVER, socket)

    def _stop_server(self, socket: Path) -> None:
        server = self._servers.pop(socket, None)
        if server is not None:
            server.stop(grace=None)

    # -- pluginregistration.Registration ------------------------------------------------------------------------
    def info(self, _request: reg.InfoRequest, _context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE, name=DRA_DRIVER, endpoint=str(self.socket.absolute()), supported_versions=[SERVICE]
        )

    def notify(self, status: reg.RegistrationStatus, _context: grpc.ServicerContext) -> reg.RegistrationStatusResponse:
        self.registered, self.registration_error = status.plugin_registered, status.error
        if status.plugin_registered:
            log.info("DRA plugin %s registered with the kubelet", DRA_DRIVER)
        else:
            log.warning("the kubelet refused DRA plugin %s: %s", DRA_DRIVER, status.error)
        return reg.RegistrationStatusResponse()

    # -- v1.DRAPlugin -------------------------------------------------------------------------------------------
    def prepare(
        self, request: dra.NodePrepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        out = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = out.claims[claim.uid]
            try:
                found = self.claims.get_resource_claim(claim.namespace, claim.name)
                if found is None:
                    raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} does not exist")
                gpus = claim_gpus(found, claim.uid, self.node, self.gpus_by_device)
                if gpus:
                    write_spec(self.cdi_dir, claim.uid, gpus)
            except (ProbeError, OSError, RuntimeError) as error:
                log.warning("cannot prepare claim %s/%s: %s", claim.namespace, claim.name, error)
                answer.error = str(error)
                continue
            for i, gpu in enumerate(gpus):
                answer.devices.add(
                    pool_name=self.node,
                    device_name=device_name(gpu),
                    # One CDI device carries the whole claim's GPUs; the other devices need none of their own.
                    cdi_device_ids=[claim_device_id(claim.uid)] if i == 0 else [],
                )
            log.info("prepared claim %s/%s: GPUs %s", claim.namespace, claim.name, [g.index for g in gpus])
        return out

    def unprepare(
        self, request: dra.NodeUnprepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        out = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = out.claims[claim.uid]
            try:
                remove_spec(self.cdi_dir, claim.uid)
            except OSError as error:
                answer.error = str(error)
        return out

    def _dra_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            _DRA_SERVICE,
            {
                "NodePrepareResources": unary(
                    self.prepare, dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse
                ),
                "NodeUnprepareResources": unary(
                    self.unprepare, dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse
                ),
            },
        )

    def _reg_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            _REGISTRATION_SERVICE,
            {
                "GetInfo": unary(self.info, reg.InfoRequest, reg.PluginInfo),
                "NotifyRegistrationStatus": unary(self.notify, reg.RegistrationStatus, reg.RegistrationStatusResponse),
            },
        )
