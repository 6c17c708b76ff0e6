"""The publisher: the NodeTopology on change, the NodePodGpus on change plus a heartbeat, labels, Events on
transitions, backoff on errors."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ProbeFactory
from probe_builders import hgx, pairs_board

from gputopo.api.labels import (
    LABEL_GPU_COUNT,
    LABEL_GPU_MODEL,
    LABEL_GPUDIRECT_RDMA,
    LABEL_HEALTH,
    LABEL_INTERCONNECT,
    LABEL_NIC_COUNT,
    LABEL_NIC_RATE,
    LABEL_NVLINK_DOMAIN,
)
from gputopo.api.nodepodgpus import PodGpus
from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo_probe.errors import ApiError
from gputopo_probe.publish.labels import node_labels
from gputopo_probe.publish.publisher import CONFIRM_PODS_AFTER_S, Publisher


class RecordingKube:
    """Records what the publisher writes; ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []  # NodeTopology statuses
        self.pod_statuses: list[dict[str, Any]] = []  # NodePodGpus statuses
        self.labels: list[dict[str, str]] = []
        self.events: list[tuple[str, str, bool]] = []
        self.fail: list[ApiError] = []
        self.foreign: dict[str, str] = {}  # labels another field manager (GPU Feature Discovery) owns

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    def node_uid(self, name: str) -> str:
        self._maybe_fail()
        return "uid-1"

    def apply_node_topology(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        self._maybe_fail()
        assert node_uid == "uid-1"
        self.statuses.append(status)

    def apply_node_pod_gpus(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        self._maybe_fail()
        assert node_uid == "uid-1"
        self.pod_statuses.append(status)

    def apply_node_labels(self, name: str, labels: dict[str, str]) -> None:
        self._maybe_fail()
        self.labels.append(labels)

    def foreign_label(self, name: str, key: str) -> str | None:
        self._maybe_fail()
        return self.foreign.get(key)

    def node_event(self, node: str, node_uid: str, *, reason: str, message: str, warning: bool) -> None:
        self._maybe_fail()
        self.events.append((reason, message, warning))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup(
    fake_probe: ProbeFactory, heartbeat_s: float = 60.0, **publisher: float
) -> tuple[Any, Any, RecordingKube, Clock, Publisher]:
    probe, _, store = fake_probe(hgx(), down_after=1, up_after=1)
    kube, clock = RecordingKube(), Clock()
    return probe, store, kube, clock, Publisher(kube, "node-1", heartbeat_s=heartbeat_s, clock=clock, **publisher)


def _with_pods(fake_probe: ProbeFactory, held: list[PodGpus]) -> tuple[Any, Any, RecordingKube, Clock, Publisher]:
    """A probe whose kubelet reports the pods in ``held`` (change it to start and end pods), published once."""
    probe, _, store = fake_probe(hgx(), down_after=1, up_after=1, pods=lambda: list(held))
    kube, clock = RecordingKube(), Clock()
    publisher = Publisher(kube, "node-1", heartbeat_s=60, clock=clock)
    assert publisher.publish(probe.poll())
    return probe, store, kube, clock, publisher


def test_the_heartbeat_rewrites_the_small_pods_object_and_only_a_resync_the_topology(fake_probe: ProbeFactory) -> None:
    probe, _, kube, clock, publisher = _setup(fake_probe, heartbeat_s=30, topology_resync_s=100)
    assert publisher.publish(probe.poll())
    assert len(kube.statuses) == 1 and len(kube.pod_statuses) == 1 and len(kube.labels) == 1
    for _ in range(5):
        clock.now += 5
        assert not publisher.publish(probe.poll())
    clock.now += 10  # 35 s after the first write
    assert publisher.publish(probe.poll())
    assert len(kube.pod_statuses) == 2, "the heartbeat"
    assert len(kube.statuses) == 1 and len(kube.labels) == 1, "the hardware reads the same: not rewritten"
    assert kube.pod_statuses[1]["observedAt"] != kube.pod_statuses[0]["observedAt"]
    clock.now += 70  # 105 s after the first write
    assert publisher.publish(probe.poll())
    assert len(kube.statuses) == 2, "the resync (a NodeTopology deleted by hand comes back)"
    assert kube.statuses[1]["gpus"] == kube.statuses[0]["gpus"]


def test_pods_and_readings_are_written_apart(fake_probe: ProbeFactory) -> None:
    """A pod that starts rewrites only the small NodePodGpus; a reading that changes only the NodeTopology."""
    held: list[PodGpus] = []
    probe, store, kube, clock, publisher = _with_pods(fake_probe, held)
    held.append(PodGpus(namespace="ns", name="job-0", gpus=[0, 1]))
    assert not publisher.publish(probe.poll())  # first seen
    clock.now += CONFIRM_PODS_AFTER_S
    assert publisher.publish(probe.poll())
    assert len(kube.statuses) == 1 and [p["name"] for p in kube.pod_statuses[-1]["pods"]] == ["job-0"]
    assert "pods" not in kube.statuses[0]
    store.link("node-1", 0, 1, "down")
    clock.now += 1
    assert publisher.publish(probe.poll())
    assert len(kube.statuses) == 2 and len(kube.pod_statuses) == 2


def test_a_fault_is_published_with_labels_and_events(fake_probe: ProbeFactory) -> None:
    probe, store, kube, clock, publisher = _setup(fake_probe)
    publisher.publish(probe.poll())
    store.link("node-1", 0, 1, "down")
    clock.now += 1
    assert publisher.publish(probe.poll())
    status = NodeTopologyStatus.model_validate(kube.statuses[-1])
    link = next(x for x in status.links if (x.a, x.b) == (0, 1))
    assert link.state.value == "Down"
    assert kube.labels[-1][LABEL_HEALTH] == "degraded"
    assert kube.events == [("LinkDown", "link 0-1: Up -> Down", True)]
    assert status.conditions[0].type == "Healthy" and status.conditions[0].status == "False"

    store.clear("node-1")
    clock.now += 1
    assert publisher.publish(probe.poll())
    assert kube.labels[-1][LABEL_HEALTH] == "healthy"
    assert kube.events[-1] == ("LinkUp", "link 0-1: Down -> Up", False)


def test_api_errors_back_off_and_lose_nothing(fake_probe: ProbeFactory) -> None:
    probe, store, kube, clock, publisher = _setup(fake_probe)
    publisher.publish(probe.poll())
    store.nic("node-1", "mlx5_2", "down")
    kube.fail = [ApiError("apply", 503), ApiError("apply", 503)]
    assert not publisher.publish(probe.poll())
    clock.now += 0.5
    assert not publisher.publish(probe.poll()), "inside the backoff: no call"
    assert len(kube.fail) == 1
    clock.now += 1
    assert not publisher.publish(probe.poll())  # second failure, now 2 s of backoff
    clock.now += 2
    assert publisher.publish(probe.poll())
    assert kube.events == [("NicDown", "nic mlx5_2: Up -> Down", True)]
    assert publisher.errors == 2 and publisher.backoff.failures == 0


@pytest.mark.parametrize(
    ("status", "delay"),
    [(503, 1.0), (0, 1.0), (429, 1.0), (409, 1.0), (403, 30.0), (422, 30.0)],
    ids=["server-error", "not-reached", "throttled", "conflict", "forbidden", "invalid"],
)
def test_errors_retrying_cannot_fix_wait_the_longest_delay(fake_probe: ProbeFactory, status: int, delay: float) -> None:
    probe, _, kube, clock, publisher = _setup(fake_probe)
    kube.fail = [ApiError("apply", status)]
    assert not publisher.publish(probe.poll())
    assert publisher.backoff.retry_at == clock.now + delay
    clock.now += delay - 0.1
    assert not publisher.publish(probe.poll()), "inside the backoff: no call"
    clock.now += 0.1
    assert publisher.publish(probe.poll())


def test_odd_data_does_not_crash(fake_probe: ProbeFactory) -> None:
    probe, _, kube, _, publisher = _setup(fake_probe)

    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("unexpected")

    kube.apply_node_topology = broken  # type: ignore[method-assign]
    assert not publisher.publish(probe.poll())
    assert publisher.errors == 1


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        (
            hgx(),
            {
                LABEL_GPU_COUNT: "8",
                LABEL_GPU_MODEL: "NVIDIA-H100-80GB-HBM3",
                LABEL_INTERCONNECT: "nvswitch",
                LABEL_NVLINK_DOMAIN: "8",
                LABEL_NIC_COUNT: "8",
                LABEL_NIC_RATE: "400",
                LABEL_GPUDIRECT_RDMA: "true",
                LABEL_HEALTH: "healthy",
            },
        ),
        (
            pairs_board(),
            {
                LABEL_GPU_COUNT: "4",
                LABEL_GPU_MODEL: "NVIDIA-A100-80GB-PCIe",
                LABEL_INTERCONNECT: "nvlink-pairs",
                LABEL_NVLINK_DOMAIN: "2",
                LABEL_NIC_COUNT: "1",
                LABEL_NIC_RATE: "100",
                LABEL_GPUDIRECT_RDMA: "false",
                LABEL_HEALTH: "healthy",
            },
        ),
    ],
    ids=["hgx-h100", "nvlink-pairs"],
)
def test_summary_labels(topology: Any, expected: dict[str, str]) -> None:
    assert node_labels(topology) == expected


def test_labels_are_retried_after_a_failed_label_write(fake_probe: ProbeFactory) -> None:
    probe, _, kube, clock, publisher = _setup(fake_probe)
    original = kube.apply_node_labels
    failures = [ApiError("labels", 503)]

    def flaky(name: str, labels: dict[str, str]) -> None:
        if failures:
            raise failures.pop()
        original(name, labels)

    kube.apply_node_labels = flaky  # type: ignore[method-assign]
    assert not publisher.publish(probe.poll())
    assert len(kube.statuses) == 1 and kube.labels == []
    clock.now += 5
    assert publisher.publish(probe.poll())
    assert len(kube.labels) == 1 and len(kube.statuses) == 1, "the status was written; only the labels were due"


def test_a_new_pod_is_published_once_a_second_after_it_was_first_seen(fake_probe: ProbeFactory) -> None:
    """The operator believes a pod's GPUs from a publication a whole second past its binding: the probe writes
    a new pod when that publication can be believed, once, not at once and again a second later."""
    held: list[PodGpus] = []
    probe, _, kube, clock, publisher = _with_pods(fake_probe, held)
    held.append(PodGpus(namespace="ns", name="job-0", gpus=[0, 1]))
    clock.now += 0.3
    assert not publisher.publish(probe.poll())  # first seen: not yet
    clock.now += 0.5
    held.append(PodGpus(namespace="ns", name="job-1", gpus=[2, 3]))
    assert not publisher.publish(probe.poll())
    clock.now += CONFIRM_PODS_AFTER_S - 0.5
    assert publisher.publish(probe.poll())  # job-0 seen 1.1 s ago: both go out
    assert [p["name"] for p in kube.pod_statuses[-1]["pods"]] == ["job-0", "job-1"]
    assert not publisher.publish(probe.poll())
    clock.now += 0.6
    assert publisher.publish(probe.poll())  # job-1 was seen only 0.6 s before that write: written again
    assert kube.pod_statuses[-1]["pods"] == kube.pod_statuses[-2]["pods"]
    for _ in range(5):
        clock.now += 2
        assert not publisher.publish(probe.poll())  # then only the heartbeat
    assert len(kube.pod_statuses) == 3 and len(kube.statuses) == 1


def test_a_pod_gone_is_published_at_once_and_a_pod_new_with_it_confirmed(fake_probe: ProbeFactory) -> None:
    """Freed GPUs are news the operator can use at once; a pod new in the same write is written again later."""
    held = [PodGpus(namespace="ns", name="old-0", gpus=[0, 1])]
    probe, _, kube, clock, publisher = _with_pods(fake_probe, held)
    clock.now += 5
    held[:] = [PodGpus(namespace="ns", name="new-0", gpus=[4, 5])]
    assert publisher.publish(probe.poll())  # old-0 gone: at once
    assert [p["name"] for p in kube.pod_statuses[-1]["pods"]] == ["new-0"]
    clock.now += 0.5
    assert not publisher.publish(probe.poll())
    clock.now += CONFIRM_PODS_AFTER_S
    assert publisher.publish(probe.poll())  # new-0's confirmation
    assert len(kube.pod_statuses) == 3 and len(kube.statuses) == 1
