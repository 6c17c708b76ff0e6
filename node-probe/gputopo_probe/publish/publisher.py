"""Publishing one node: NodeTopology status and Node labels when the hardware reads otherwise, NodePodGpus when
the pods on the GPUs change (plus a heartbeat), Events on health transitions, API errors retried with backoff.
Nothing here raises: odd data is logged and skipped."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from gputopo.api.labels import LABEL_GFD_CLIQUE, LABEL_NVLINK_CLIQUE
from gputopo.topology.model import Topology
from gputopo_probe.errors import ApiError
from gputopo_probe.health.monitor import Transition
from gputopo_probe.probe import Poll
from gputopo_probe.publish.backoff import Backoff
from gputopo_probe.publish.labels import node_labels

__all__ = ["DeviceDriver", "KubeWriter", "Publisher"]

log = logging.getLogger(__name__)
_MAX_PENDING_EVENTS = 100


class KubeWriter(Protocol):
    def node_uid(self, name: str) -> str: ...
    def apply_node_topology(self, name: str, node_uid: str, status: dict[str, Any]) -> None: ...
    def apply_node_pod_gpus(self, name: str, node_uid: str, status: dict[str, Any]) -> None: ...
    def apply_node_labels(self, name: str, labels: dict[str, str]) -> None: ...
    def foreign_label(self, name: str, key: str) -> str | None: ...
    def node_event(self, node: str, node_uid: str, *, reason: str, message: str, warning: bool) -> None: ...


class DeviceDriver(Protocol):
    """Publishes the node's GPUs as a DRA driver would (the sandbox's fake one); writes only on change."""

    def publish(self, node: str, node_uid: str, topology: Topology) -> None: ...


def _reason(t: Transition) -> str:
    kind = t.subject.split(" ", 1)[0]
    return {"link": "Link", "nic": "Nic", "gpu": "Gpu"}.get(kind, "Health") + t.new


# The operator believes a pod's GPUs only from a publication a whole second past the pod's binding (the API
# server keeps that time in whole seconds). So a new pod is published this long after the probe first saw it,
# not at once: a write at once would be one the operator cannot believe, followed by the one it can. A write
# that happens sooner anyway (a pod gone) is written once more this long after its newest pod was first seen.
CONFIRM_PODS_AFTER_S = 1.1
# The NodeTopology is written when the readings change, and again this often (a NodeTopology deleted by hand
# comes back); the small NodePodGpus carries the heartbeat.
TOPOLOGY_RESYNC_S = 600.0


def _readings(key: tuple[object, ...]) -> tuple[object, ...]:
    return key[:-1]  # ``Poll.key`` ends with the pods


def _pods(key: tuple[object, ...]) -> frozenset[object]:
    pods = key[-1]
    return frozenset(pods) if isinstance(pods, tuple) else frozenset()


class Publisher:
    """Two objects per node, written apart: the NodeTopology when the hardware or its health reads otherwise,
    the NodePodGpus when the pods on the GPUs change and every ``heartbeat_s``."""

    def __init__(
        self,
        kube: KubeWriter,
        node: str,
        *,
        heartbeat_s: float = 60.0,
        topology_resync_s: float = TOPOLOGY_RESYNC_S,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        driver: DeviceDriver | None = None,
    ) -> None:
        """With ``driver`` (the sandbox in DRA mode) each poll's GPUs also go to that driver, which publishes
        them as a ResourceSlice."""
        self.kube = kube
        self.driver = driver
        self.node = node
        self.heartbeat_s = heartbeat_s
        self.topology_resync_s = topology_resync_s
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.node_uid: str | None = None
        self.writes = 0
        self.errors = 0
        self.last_success: float | None = None
        self._readings: tuple[object, ...] | None = None  # what the written NodeTopology says
        self._topology_written_at = float("-inf")
        self._pods: frozenset[object] | None = None  # what the written NodePodGpus says
        self._pods_written_at = float("-inf")
        self._labels: dict[str, str] | None = None
        self._labels_key: tuple[object, ...] | None = None  # the poll the written labels summarise
        self._confirm_at: float | None = None  # when to write the pods again after a change of them
        self._new_pods: dict[object, float] = {}  # pods not yet written, and when each was first seen
        self._events: list[Transition] = []

    @property
    def published(self) -> bool:
        return self._readings is not None and self._pods is not None

    def queue_events(self, transitions: list[Transition]) -> None:
        self._events.extend(transitions)
        del self._events[: max(0, len(self._events) - _MAX_PENDING_EVENTS)]

    def needs(self, poll: Poll, now: float | None = None) -> bool:
        """Whether ``publish`` would write anything now (cheap: the farm asks every node every tick)."""
        now = self.clock() if now is None else now
        if not self.backoff.ready(now):
            return False
        return bool(
            self._events
            or poll.transitions
            or self._topology_due(poll, now)
            or self._pods_due(poll, now)
            or poll.key != self._labels_key
        )

    def _topology_due(self, poll: Poll, now: float) -> bool:
        return _readings(poll.key) != self._readings or now - self._topology_written_at >= self.topology_resync_s

    def _pods_due(self, poll: Poll, now: float) -> bool:
        """Whether the pods are to be written: at once when one is gone (its GPUs are free, say so now), new
        ones once the first seen of them was seen ``CONFIRM_PODS_AFTER_S`` ago; and the heartbeat, and the
        confirmation of a write made before its newest pods were old enough."""
        if self._pods is None:
            return True
        pods = _pods(poll.key)
        self._new_pods = {pod: self._new_pods.get(pod, now) for pod in pods - self._pods}
        if not self._pods <= pods:
            return True
        if self._new_pods and now >= min(self._new_pods.values()) + CONFIRM_PODS_AFTER_S:
            return True
        confirm = self._confirm_at is not None and now >= self._confirm_at
        return confirm or now - self._pods_written_at >= self.heartbeat_s

    def _defer_to_gfd(self, labels: dict[str, str]) -> dict[str, str]:
        """GPU Feature Discovery's clique label, when another manager set it, is read, never overwritten: the
        probe leaves the key out of its apply and publishes GFD's value as its own domain label."""
        if LABEL_GFD_CLIQUE not in labels:
            return labels
        theirs = self.kube.foreign_label(self.node, LABEL_GFD_CLIQUE)
        if theirs is None:
            return labels
        if theirs != labels[LABEL_GFD_CLIQUE]:
            log.warning(
                "node %s: %s is %r, NVML says %r; keeping GFD's",
                self.node,
                LABEL_GFD_CLIQUE,
                theirs,
                labels[LABEL_GFD_CLIQUE],
            )
        deferred = {k: v for k, v in labels.items() if k != LABEL_GFD_CLIQUE}
        deferred[LABEL_NVLINK_CLIQUE] = theirs
        return deferred

    def publish(self, poll: Poll) -> bool:
        """Write what is due; True when the API was written. Failures wait for the backoff."""
        self.queue_events(poll.transitions)
        now = self.clock()
        if not self.needs(poll, now):
            return False
        topology_due, pods_due = self._topology_due(poll, now), self._pods_due(poll, now)
        labels = node_labels(poll.topology) if poll.key != self._labels_key else self._labels
        wrote = False
        try:
            if self.node_uid is None:
                self.node_uid = self.kube.node_uid(self.node)
            if topology_due:
                self.kube.apply_node_topology(self.node, self.node_uid, poll.status().to_api())
                self._readings, self._topology_written_at = _readings(poll.key), now
                wrote = True
            if pods_due:
                self.kube.apply_node_pod_gpus(self.node, self.node_uid, poll.pod_status().to_api())
                # Written again once its newest pod is old enough, unless it already is.
                newest = max(self._new_pods.values(), default=float("-inf"))
                self._confirm_at = newest + CONFIRM_PODS_AFTER_S if now < newest + CONFIRM_PODS_AFTER_S else None
                self._pods, self._pods_written_at = _pods(poll.key), now
                self._new_pods.clear()
                wrote = True
            if self.driver is not None:
                self.driver.publish(self.node, self.node_uid, poll.topology)
            if labels is not None and labels != self._labels:
                self.kube.apply_node_labels(self.node, self._defer_to_gfd(labels))
                self._labels = labels
                wrote = True
            self._labels_key = poll.key
            while self._events:
                t = self._events[0]
                self.kube.node_event(
                    self.node,
                    self.node_uid,
                    reason=_reason(t),
                    message=f"{t.subject}: {t.old} -> {t.new}{': ' + t.reason if t.reason else ''}",
                    warning=t.worse,
                )
                self._events.pop(0)
                wrote = True
        except ApiError as error:
            self.errors += 1
            delay = self.backoff.failed(now, lasting=not error.retryable)
            log.log(
                logging.WARNING if error.retryable else logging.ERROR,
                "node %s: %s; retrying in %.1fs",
                self.node,
                error,
                delay,
            )
            return False
        except Exception:  # odd data must not crash the probe
            self.errors += 1
            self.backoff.failed(now)
            log.exception("node %s: cannot publish", self.node)
            return False
        self.backoff.succeeded()
        if wrote:  # a change of the pods alone may have nothing to write yet
            self.writes += 1
            self.last_success = now
        return wrote
