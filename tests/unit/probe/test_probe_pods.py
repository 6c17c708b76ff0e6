"""What each pod holds: the kubelet PodResources API, and the fake device plugin's choice."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from probe_builders import hgx, pairs_board

from gputopo.api.nodepodgpus import PodGpus
from gputopo.topology.catalog import load_node_type
from gputopo_probe.discovery.gpus import dra_device_names
from gputopo_probe.errors import PodResourcesError
from gputopo_probe.fake.allocation import FakeAllocator
from gputopo_probe.fake.faults import FaultStore
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.nvml import Nvml
from gputopo_probe.podresources import api_pb2
from gputopo_probe.podresources.client import PodResourcesClient


def pod(
    name: str, gpus: int, plan: str | None = None, node: str = "node-1", phase: str = "Pending", uid: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": uid or f"uid-{name}",
            "annotations": {"gputopo.io/gpus": plan} if plan else {},
        },
        "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("mode", "plan", "expected"),
    [
        ("plan", "4,5", [4, 5]),
        ("device-plugin", "4,5", [0, 1]),
        ("plan", "3", [0, 1]),
        ("plan", "9,10", [0, 1]),
    ],
    ids=["plan-honoured", "device-plugin-ignores-plan", "plan-of-wrong-size", "plan-of-missing-gpus"],
)
def test_fake_allocation(mode: Any, plan: str, expected: list[int]) -> None:
    allocator = FakeAllocator(hgx(), mode)
    allocator.observe("ADDED", pod("w0", 2, plan))
    assert allocator.pods() == [PodGpus(namespace="ml", name="w0", gpus=expected)]


def test_plan_of_taken_gpus_falls_back_and_deletion_frees() -> None:
    allocator = FakeAllocator(hgx())
    allocator.observe("ADDED", pod("a", 2, "0,1"))
    allocator.observe("ADDED", pod("b", 2, "1,2"))
    assert [p.gpus for p in allocator.pods()] == [[0, 1], [2, 3]]
    allocator.observe("MODIFIED", pod("a", 2, "0,1", phase="Succeeded"))
    allocator.observe("DELETED", pod("b", 2))
    assert allocator.pods() == [] and allocator.free() == list(range(8))


def test_resync_lets_go_of_pods_deleted_while_no_watch_ran() -> None:
    allocator = FakeAllocator(hgx())
    allocator.observe("ADDED", pod("gone", 2, "0,1"))
    allocator.observe("ADDED", pod("kept", 2, "2,3"))
    allocator.resync([pod("kept", 2, "2,3"), pod("new", 2, "4,5")])
    assert allocator.pods() == [
        PodGpus(namespace="ml", name="kept", gpus=[2, 3]),
        PodGpus(namespace="ml", name="new", gpus=[4, 5]),
    ]


def test_a_pod_made_again_under_its_name_gets_its_own_plan() -> None:
    """A gang re-placed with grace 0 is deleted and created again under the same names; a list that sees
    only the new pod (the deletion fell between two watches) must not hand it the old pod's GPUs."""
    allocator = FakeAllocator(hgx())
    allocator.observe("ADDED", pod("job-0", 2, "0,1", uid="first"))
    allocator.resync([pod("job-0", 2, "2,3", uid="second")])
    assert allocator.pods() == [PodGpus(namespace="ml", name="job-0", gpus=[2, 3])]


@pytest.mark.parametrize(
    ("pod_spec", "held"),
    [(pod("x", 0), False), (pod("x", 2, node=""), False), (pod("x", 9), False), (pod("x", 1), True)],
    ids=["no-gpus", "not-bound", "too-many", "one-gpu"],
)
def test_only_bound_gpu_pods_are_allocated(pod_spec: dict[str, Any], held: bool) -> None:
    allocator = FakeAllocator(hgx())
    allocator.observe("ADDED", pod_spec)
    assert bool(allocator.pods()) is held


def test_device_plugin_mode_takes_the_free_nvlink_pair_and_holds_nothing_when_short() -> None:
    allocator = FakeAllocator(pairs_board(), "device-plugin")
    allocator.observe("ADDED", pod("a", 1))
    allocator.observe("ADDED", pod("b", 2))
    allocator.observe("ADDED", pod("c", 2))
    assert [(p.name, p.gpus) for p in allocator.pods()] == [("a", [0]), ("b", [2, 3])]


@pytest.mark.parametrize("mode", ["plan", "device-plugin"])
def test_a_gpu_the_device_plugin_reports_unhealthy_is_never_handed_out(mode: Any) -> None:
    """The kubelet allocates only healthy devices: neither a plan naming a GPU with an XID nor the plugin's own
    pick may include it, and it is free again once healthy."""
    unhealthy = {0}
    allocator = FakeAllocator(hgx(), mode, lambda: unhealthy)
    allocator.observe("ADDED", pod("a", 2, "0,1"))
    assert 0 not in allocator.pods()[0].gpus
    assert 0 not in allocator.free()
    unhealthy.clear()
    assert 0 in allocator.free()


def test_the_fault_store_names_the_gpus_with_an_xid(tmp_path: Path) -> None:
    store = FaultStore(tmp_path)
    store.gpu("node-1", 3, xid=79)
    store.gpu("node-1", 5, hot=True)
    assert store.xid_gpus("node-1") == {3}
    assert store.xid_gpus("node-2") == set()
    node = FakeNode("node-1", hgx(), faults=store, sysfs_root=tmp_path / "sys")
    node.sync_faults()
    assert node.xid_gpus() == {3}, "a single fake node reads the same from its fake NVML"
    store.path("node-1").write_text("{not json")
    assert store.xid_gpus("node-1") == set()


class Lister(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, response: api_pb2.ListPodResourcesResponse) -> None:
        self.response = response

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if details.method != "/v1.PodResourcesLister/List":
            return None
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self.response,
            request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
            response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
        )


def dra_device(driver: str, pool: str, device: str) -> api_pb2.ClaimResource:
    cdi = [api_pb2.CDIDevice(name=f"k8s.gpu.nvidia.com/claim=uid-{device}")]
    return api_pb2.ClaimResource(driver_name=driver, pool_name=pool, device_name=device, cdi_devices=cdi)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Path]:
    """A gRPC server on a unix socket answering List as a kubelet would."""
    response = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="w1",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(
                        name="main",
                        devices=[
                            api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-b", "GPU-d"]),
                            api_pb2.ContainerDevices(resource_name="rdma/hca", device_ids=["mlx5_0"]),
                        ],
                    )
                ],
            ),
            api_pb2.PodResources(
                name="w0",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(
                        name="main",
                        devices=[api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["0"])],
                    )
                ],
            ),
            api_pb2.PodResources(name="cpu-only", namespace="ml", containers=[api_pb2.ContainerResources(name="c")]),
            api_pb2.PodResources(
                name="w2",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(
                        name="main",
                        dynamic_resources=[
                            api_pb2.DynamicResource(
                                claim_name="w2-0-g1",
                                claim_namespace="ml",
                                claim_resources=[
                                    dra_device("gpu.nvidia.com", "node-a", "gpu-7"),  # /dev/nvidia7 is index 2
                                    dra_device("gpu.nvidia.com", "node-a", "gpu-0"),
                                    dra_device("gpu.nvidia.com", "node-b", "gpu-1"),  # another node's pool
                                    dra_device("rdma.example.com", "node-a", "gpu-1"),  # another driver
                                    dra_device("gpu.nvidia.com", "node-a", "gpu-9"),  # not a GPU this node has
                                ],
                            )
                        ],
                    )
                ],
            ),
        ]
    )
    socket = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([Lister(response)])
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    yield socket
    server.stop(None)


def test_pod_resources_client_maps_uuids_to_indices(kubelet: Path) -> None:
    client = PodResourcesClient(kubelet)
    try:
        pods = client.source(["GPU-a", "GPU-b", "GPU-c", "GPU-d"])()
    finally:
        client.close()
    assert pods == [PodGpus(namespace="ml", name="w0", gpus=[0]), PodGpus(namespace="ml", name="w1", gpus=[1, 3])]


def test_pod_resources_client_maps_dra_devices_of_this_nodes_pool_by_minor(kubelet: Path) -> None:
    client = PodResourcesClient(kubelet)
    try:
        pods = client.source(["GPU-a", "GPU-b", "GPU-c", "GPU-d"], "node-a", {"gpu-0": 0, "gpu-1": 1, "gpu-7": 2})()
    finally:
        client.close()
    assert PodGpus(namespace="ml", name="w2", gpus=[0, 2]) in pods


def test_fake_gpus_are_named_as_the_fake_dra_driver_names_them() -> None:
    topology = load_node_type("dgx-a100")
    node = FakeNode("n1", topology)
    try:
        assert dra_device_names(Nvml(node.nvml)) == {f"gpu-{g.index}": g.index for g in topology.gpus}
    finally:
        node.close()


def test_pod_resources_unreachable_is_a_probe_error(tmp_path: Path) -> None:
    client = PodResourcesClient(tmp_path / "absent.sock", timeout_s=0.5)
    try:
        with pytest.raises(PodResourcesError):
            client.list()
    finally:
        client.close()
