"""A client of the kubelet PodResources API: which GPUs each pod on this node holds.

With NVIDIA's device plugin the kubelet, not gputopo, picks a pod's GPUs; this is how the probe learns which.
Device ids are GPU UUIDs (the plugin's default) or indices. With NVIDIA's DRA driver the kubelet reports each
container's claims instead (``dynamic_resources``, GA in 1.36): devices of driver ``gpu.nvidia.com`` in this
node's pool, named ``gpu-<minor>`` after ``/dev/nvidia<minor>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import grpc

from gputopo.api.group import DRA_DRIVER, GPU_RESOURCE
from gputopo.api.nodepodgpus import PodGpus
from gputopo_probe.errors import PodResourcesError
from gputopo_probe.podresources import api_pb2

__all__ = ["DEFAULT_SOCKET", "PodResourcesClient", "pod_gpus"]

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
_LIST: Final = "/v1.PodResourcesLister/List"


def pod_gpus(
    response: api_pb2.ListPodResourcesResponse,
    index_of: Callable[[str], int | None],
    node: str = "",
    dra_devices: Mapping[str, int] | None = None,
) -> list[PodGpus]:
    """The pods holding GPUs, sorted by namespace and name, each with its GPU indices.

    ``index_of`` maps a device plugin's device id; ``dra_devices`` maps a DRA device name of this ``node``'s pool.
    """
    out = []
    for pod in response.pod_resources:
        gpus: set[int] = set()
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name != GPU_RESOURCE:
                    continue
                for device_id in devices.device_ids:
                    index = index_of(device_id)
                    if index is not None:
                        gpus.add(index)
            for claim in container.dynamic_resources:
                for device in claim.claim_resources:
                    if device.driver_name == DRA_DRIVER and device.pool_name == node and dra_devices:
                        index = dra_devices.get(device.device_name)
                        if index is not None:
                            gpus.add(index)
        if gpus:
            out.append(PodGpus(namespace=pod.namespace, name=pod.name, gpus=sorted(gpus)))
    return sorted(out, key=lambda p: (p.namespace, p.name))


class PodResourcesClient:
    def __init__(self, socket: str | Path = DEFAULT_SOCKET, *, timeout_s: float = 5.0) -> None:
        self.socket = str(socket)
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        self._list = self._channel.unary_unary(
            _LIST,
            request_serializer=api_pb2.ListPodResourcesRequest.SerializeToString,
            response_deserializer=api_pb2.ListPodResourcesResponse.FromString,
        )

    def close(self) -> None:
        self._channel.close()

    def list(self) -> api_pb2.ListPodResourcesResponse:
        try:
            response: api_pb2.ListPodResourcesResponse = self._list(
                api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s
            )
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else None
            raise PodResourcesError(f"PodResources List on {self.socket} failed: {code}") from error
        return response

    def source(
        self, uuids: list[str], node: str = "", dra_devices: Mapping[str, int] | None = None
    ) -> Callable[[], list[PodGpus]]:
        """A pod source for the probe: GPU ids mapped to indices by UUID, or taken as indices; DRA devices of
        ``node``'s pool by ``dra_devices`` (device name -> index)."""
        by_uuid = {u: i for i, u in enumerate(uuids)}

        def index_of(device_id: str) -> int | None:
            if device_id in by_uuid:
                return by_uuid[device_id]
            return int(device_id) if device_id.isdigit() and int(device_id) < len(uuids) else None

        return lambda: pod_gpus(self.list(), index_of, node, dra_devices)
