"""The poll loop of one probe or of a farm of fake probes: poll, publish, wait for the next tick."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from gputopo_probe.errors import ProbeError
from gputopo_probe.probe import Poll, Probe
from gputopo_probe.publish.publisher import Publisher
from gputopo_probe.publish.server import Metrics

__all__ = ["Member", "Runner"]

log = logging.getLogger(__name__)


@dataclass
class Member:
    """One node of the loop: its probe and its publisher (None with nothing to publish to)."""

    node: str
    probe: Probe
    publisher: Publisher | None
    polls: int = 0
    unhealthy: int = 0
    _inflight: Future[bool] | None = field(default=None, repr=False)


DEFAULT_CONFIRM_S = 0.25


class Runner:
    """Polls every member each ``interval`` seconds; publishing runs on a small pool so a slow API server
    never delays health polls, with at most one publish in flight per node.

    A reading worse than the state it would replace needs ``down_after`` readings in a row (hysteresis);
    a node with such a reading pending is re-read every ``confirm_s`` seconds until it is confirmed or
    gone, so a real failure is published within a fraction of the interval instead of a whole interval
    later. Better readings are confirmed at the interval: a link that comes back stays out a little
    longer, which is the safe side. ``confirm_s`` of 0 (or not below the interval) turns this off.
    """

    def __init__(
        self,
        interval_s: float,
        metrics: Metrics | None = None,
        *,
        publish_workers: int = 8,
        confirm_s: float = DEFAULT_CONFIRM_S,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.confirm_s = confirm_s if 0 < confirm_s < interval_s else 0.0
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.members: list[Member] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=publish_workers, thread_name_prefix="publish")
        self._stop = threading.Event()
        # Waits up to that many seconds on ``clock``; True once stopped. Tests give a clock they step.
        self.wait = wait or self._stop.wait
        self.last_tick: float | None = None

    def add(self, member: Member) -> None:
        with self._lock:
            self.members.append(member)

    def alive(self) -> bool:
        return self.last_tick is not None and self.clock() - self.last_tick < 3 * self.interval_s + 5

    def ready(self) -> bool:
        with self._lock:
            members = list(self.members)
        return bool(members) and all(m.publisher is None or m.publisher.published for m in members)

    def tick(self) -> None:
        with self._lock:
            members = list(self.members)
        for member in members:
            self._poll(member)
        self.last_tick = self.clock()

    def confirming(self) -> list[Member]:
        with self._lock:
            return [m for m in self.members if m.probe.confirming]

    def confirm(self) -> int:
        """Re-read the members whose worse readings wait for confirmation; how many were read."""
        members = self.confirming()
        for member in members:
            self._poll(member)
        return len(members)

    def _poll(self, member: Member) -> None:
        started = time.perf_counter()
        try:
            poll = member.probe.poll()
        except ProbeError as error:
            log.warning("node %s: poll failed: %s", member.node, error)
            return
        except Exception:  # never let one node's odd data stop the loop
            log.exception("node %s: poll failed", member.node)
            return
        self.metrics.poll_seconds.observe(time.perf_counter() - started)
        self.metrics.polls.labels(member.node).inc()
        member.polls += 1
        for t in poll.transitions:
            self.metrics.transitions.labels(member.node, t.subject).inc()
        publisher = member.publisher
        if publisher is None:
            return
        if member._inflight is not None and not member._inflight.done():
            publisher.queue_events(poll.transitions)  # published with the next poll
            return
        if publisher.needs(poll):
            member._inflight = self._pool.submit(self._publish, member, publisher, poll)

    def _publish(self, member: Member, publisher: Publisher, poll: Poll) -> bool:
        before = publisher.errors
        wrote = publisher.publish(poll)
        if wrote:
            self.metrics.writes.labels(member.node).inc()
        if publisher.errors > before:
            self.metrics.api_errors.labels(member.node).inc()
        return wrote

    def run(self) -> None:
        next_tick = self.clock()
        while not self._stop.is_set():
            self.tick()
            next_tick += self.interval_s
            if next_tick < self.clock():  # fell behind: do not try to catch up with a burst
                next_tick = self.clock()
            self._wait_confirming(next_tick)
            self.wait(max(0.0, next_tick - self.clock()))

    def _wait_confirming(self, next_tick: float) -> None:
        """Until the next tick, re-read every ``confirm_s`` the nodes with a reading to confirm."""
        if not self.confirm_s:
            return
        while not self._stop.is_set() and next_tick - self.clock() > self.confirm_s and self.confirming():
            if self.wait(self.confirm_s):
                return
            self.confirm()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for m in self.members:
                m.probe.close()
