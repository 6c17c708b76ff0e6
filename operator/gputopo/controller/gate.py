"""A semaphore whose waiters are let in by priority, then in order of arrival.

The control loop's writes share the API concurrency: a new gang's writes go before a running job's status,
and Events go last, so a burst of placements reaches kube-scheduler first and the rest follows when there is
room. ``asyncio.Semaphore`` lets its waiters in first come, first served only.

A free slot is not room enough: the API server, not the number of requests in flight, is what a burst waits
for, so a waiter is let in only while nobody of a more urgent priority holds a slot or waits for one. A waiter
that has waited ``patience`` seconds is let in at the next free slot anyway, so a steady stream of urgent
work delays the rest but never stops it. Nor is a waiting line a reason to wait: an arrival more urgent than
everyone waiting takes a free slot at once (an Event waiting for a status write to go through does not hold up a
gang's placement while slots are free).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["PriorityGate"]


@dataclass(order=True)
class _Waiter:
    priority: int
    arrival: int
    since: float = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


class PriorityGate:
    """At most ``slots`` holders at once; a free slot goes to the waiter of the lowest priority number, and only
    while no holder or waiter is more urgent (or once it has waited ``patience`` seconds)."""

    __slots__ = ("_arrivals", "_clock", "_free", "_holding", "_patience", "_timer", "_waiting")

    def __init__(self, slots: int, patience: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self._free = slots
        self._patience = patience
        self._clock = clock
        self._waiting: list[_Waiter] = []
        self._holding: Counter[int] = Counter()  # holders per priority
        self._arrivals = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    def _urgent(self, priority: int) -> bool:
        """Whether someone more urgent than ``priority`` holds a slot."""
        return any(n for p, n in self._holding.items() if p < priority)

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not self.waiting and not self._urgent(priority):
            self._take(priority)
            return
        waiter = _Waiter(priority, next(self._arrivals), self._clock(), asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        # Slots may be free while less urgent waiters wait for more urgent holders: one more urgent than them
        # goes in now, not at the next release.
        self._let_in()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(priority)  # handed a slot just as it was cancelled: pass it on
            raise

    def release(self, priority: int) -> None:
        self._holding[priority] -= 1
        self._free += 1
        self._let_in()

    def _take(self, priority: int) -> None:
        self._free -= 1
        self._holding[priority] += 1

    def _let_in(self) -> None:
        while self._waiting and self._waiting[0].future.done():
            heapq.heappop(self._waiting)  # cancelled
        now = self._clock()
        while self._free > 0 and self._waiting:
            # The most urgent waiter, unless it must wait for more urgent holders: then the longest-waiting
            # one that has run out of patience.
            head = self._waiting[0]
            chosen = head if not self._urgent(head.priority) else None
            if chosen is None:
                overdue = [w for w in self._waiting if not w.future.done() and now - w.since >= self._patience]
                chosen = min(overdue, key=lambda w: w.since, default=None)
            if chosen is None:
                break
            self._waiting.remove(chosen)
            heapq.heapify(self._waiting)
            if chosen.future.done():
                continue
            self._take(chosen.priority)
            chosen.future.set_result(None)
        self._wake_later()

    def _wake_later(self) -> None:
        """Look again when the oldest waiter runs out of patience, should no release come first."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock()
        # Overdue waiters are let in at the next release; only the ones still patient need a timer.
        patient = [w.since for w in self._waiting if not w.future.done() and now - w.since < self._patience]
        if patient:
            delay = min(patient) + self._patience - now
            self._timer = asyncio.get_running_loop().call_later(delay, self._let_in)

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release(priority)
