"""One node's probe: discovery once, then a health poll per tick, producing the status to publish."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import yaml

from gputopo.api.group import API_VERSION
from gputopo.api.nodepodgpus import NodePodGpusStatus, PodGpus
from gputopo.api.nodetopology import NodeTopology, NodeTopologyStatus
from gputopo.topology.model import Topology
from gputopo_probe.discovery import Inventory, discover
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.health.monitor import GpuDetail, HealthMonitor, Transition
from gputopo_probe.nvml import Nvml
from gputopo_probe.roles import NicRoleRules
from gputopo_probe.status import build_status

__all__ = ["PodSource", "Poll", "Probe", "to_yaml"]

log = logging.getLogger(__name__)

PodSource = Callable[[], list[PodGpus]]


@dataclass
class Poll:
    """One poll's outcome; the statuses are built only when they are going to be published."""

    topology: Topology
    details: list[GpuDetail]
    pods: list[PodGpus]
    observed_at: datetime
    backend: str
    transitions: list[Transition] = field(default_factory=list)
    # The key of the poll before, when this one repeats its readings and pods: the key is then the same.
    repeated_key: tuple[object, ...] | None = None

    @cached_property
    def key(self) -> tuple[object, ...]:
        """What a change is: everything but the time and the temperatures (noise that would write each poll)."""
        if self.repeated_key is not None:
            return self.repeated_key
        t = self.topology
        details = tuple((d.throttle_reasons, d.xid, d.active_links) for d in self.details)
        pods = tuple((p.namespace, p.name, tuple(p.gpus)) for p in self.pods)
        return (t.gpus, tuple(sorted(t.links.items())), t.nics, t.system, details, pods)

    def status(self) -> NodeTopologyStatus:
        return build_status(self.topology, self.details, backend=self.backend, observed_at=self.observed_at)

    def pod_status(self) -> NodePodGpusStatus:
        return NodePodGpusStatus(observed_at=self.observed_at, pods=list(self.pods))


class Probe:
    def __init__(
        self,
        nvml: Nvml,
        sysfs: Sysfs,
        *,
        down_after: int = 2,
        up_after: int = 2,
        xid_thread: bool = True,
        before_poll: Callable[[], object] | None = None,
        quiet: Callable[[], bool] | None = None,
        pods: PodSource | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        nic_rules: NicRoleRules | None = None,
    ) -> None:
        self.nvml, self.sysfs = nvml, sysfs
        self.before_poll = before_poll
        self.quiet = quiet
        self._last: Poll | None = None
        self.pods = pods
        self.clock = clock
        # The inventory is what the node has when whole; faults present at start are applied after it, so
        # the first polls report them as Down rather than as links the node never had.
        self.inventory: Inventory = discover(nvml, sysfs, nic_rules)
        if before_poll:
            before_poll()
        self.monitor = HealthMonitor(
            nvml, sysfs, self.inventory, down_after=down_after, up_after=up_after, xid_thread=xid_thread
        )

    def close(self) -> None:
        self.monitor.close()

    @property
    def confirming(self) -> bool:
        """A worse reading waits to be confirmed: the runner re-reads this node soon, not a whole interval on."""
        return self.monitor.confirming

    def _pods(self) -> list[PodGpus]:
        if self.pods is None:
            return []
        try:
            return self.pods()
        except Exception as error:  # a pod source failing must not stop health publishing
            log.warning("pod GPUs unavailable: %s", error)
            return []

    def poll(self) -> Poll:
        """One health poll. With ``quiet`` (fake nodes in a farm), hardware that reads as before and a
        settled hysteresis reuse the last readings: the outcome would be the same, at a stat's cost."""
        if self.quiet is not None:
            if self.quiet() and self._last is not None and self.monitor.settled:
                last = self._last
                pods, now = self._pods(), self.clock()
                repeated = last.key if pods == last.pods else None
                poll = Poll(last.topology, last.details, pods, now, last.backend, repeated_key=repeated)
                self._last = poll
                return poll
        elif self.before_poll:
            self.before_poll()
        transitions = self.monitor.poll()
        view = self.monitor.view
        self._last = Poll(view.topology, view.details, self._pods(), self.clock(), self.nvml.backend, transitions)
        return self._last


def to_yaml(node_name: str, status: NodeTopologyStatus) -> str:
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": NodeTopology.kind,
        "metadata": {"name": node_name},
        "status": status.to_api(),
    }
    return yaml.safe_dump(doc, sort_keys=False)
