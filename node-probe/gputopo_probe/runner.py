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


class Runner:
    """Polls every member each ``interval`` seconds; publishing runs on a small pool so a slow API server
    never delays health polls, with at most one publish in flight per node."""

    def __init__(
        self,
        interval_s: float,
        metrics: Metrics | None = None,
        *,
        publish_workers: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.members: list[Member] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=publish_workers, thread_name_prefix="publish")
        self._stop = threading.Event()
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
            delay = next_tick - self.clock()
            if delay < 0:  # fell behind: do not try to catch up with a burst
                next_tick = self.clock()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for m in self.members:
                m.probe.close()
