"""Foreign gangs' writes in the priority gate of the TrainingJobs' writes, several gangs to one slot.

A slot of ``Writer.gate`` is the share of the API concurrency one TrainingJob's writes take: they go out several
at once (its pods, its Service beside them). A foreign gang's writes go out one at a time (its record, its status,
then its pods' patches), so a slot each would leave most of that share unused while a burst of gangs waits for
slots. Here up to ``per_slot`` gangs' writes of one priority share a slot: the gate's order holds (new plans
first, Events last), and gangs take no more of the API concurrency than as many TrainingJobs would.

A shared slot takes in no more than ``per_slot`` writers over its life, so it is let go once they are done and
cannot be held on to by a steady stream of writers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gputopo.controller.gate import PriorityGate

__all__ = ["SharedSlots"]


class _Shared:
    """One slot of the gate, taken for a priority and shared by its writers."""

    __slots__ = ("joined", "taken", "using")

    def __init__(self, gate: PriorityGate, priority: int) -> None:
        self.taken: asyncio.Task[None] = asyncio.create_task(gate.acquire(priority))
        self.joined = 0  # writers taken in over its life
        self.using = 0  # writers in it now


class SharedSlots:
    """``gate``'s slots, each shared by up to ``per_slot`` writers of one priority."""

    __slots__ = ("_gate", "_open", "per_slot")

    def __init__(self, gate: PriorityGate, per_slot: int) -> None:
        if per_slot < 1:
            raise ValueError("a shared slot takes at least one writer")
        self._gate, self.per_slot = gate, per_slot
        self._open: dict[int, _Shared] = {}  # per priority, the slot that still takes writers in

    @property
    def gate(self) -> PriorityGate:
        return self._gate

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        shared = self._open.get(priority)
        if shared is None:
            shared = self._open[priority] = _Shared(self._gate, priority)
        shared.joined += 1
        shared.using += 1
        if shared.joined >= self.per_slot:
            del self._open[priority]  # full: the next writer opens another
        try:
            await asyncio.shield(shared.taken)
            yield
        finally:
            shared.using -= 1
            if shared.using == 0:
                self._let_go(shared, priority)

    def _let_go(self, shared: _Shared, priority: int) -> None:
        """The last writer of ``shared`` left: its gate slot goes back (or is no longer waited for)."""
        if self._open.get(priority) is shared:
            del self._open[priority]
        taken = shared.taken
        if not taken.done():
            taken.cancel()  # the gate passes on a slot it hands over just as the wait is cancelled
        elif not taken.cancelled() and taken.exception() is None:
            self._gate.release(priority)
