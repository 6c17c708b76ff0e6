"""Per node, new gangs' pods reach kube-scheduler in the order they were planned (devicePlugin mode).

In devicePlugin mode a job's plan is the device plugin's choice on what the jobs planned before it left free on
the node. The kubelet makes that choice when it admits the pod, in the order kube-scheduler binds: if a job
planned later is admitted first, it gets the GPUs planned for the earlier one, and both differ from their plans.
A gang's writes therefore create its pods only once every gang planned before it on one of its nodes has had its
own bound, or after ``NODE_TURN_SECONDS`` whatever happened to those (the runtime gives a turn up when the watch
shows the gang's pods bound).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["NODE_TURN_SECONDS", "NodeTurns", "Turn"]

NODE_TURN_SECONDS: Final = 2.0


@dataclass(frozen=True, slots=True)
class Turn:
    """One gang's place in the order of its nodes: what it waits for, and what it lets go."""

    before: tuple[asyncio.Event, ...]
    mine: asyncio.Event

    @property
    def due(self) -> bool:
        """Whether the gangs planned before this one on its nodes have all released their pods already."""
        return all(e.is_set() for e in self.before)

    async def wait(self, timeout: float = NODE_TURN_SECONDS) -> None:
        """Until the gangs planned before this one on its nodes released their pods, or ``timeout``."""
        if not self.before:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self.before)), timeout)

    def release(self) -> None:
        """This gang's pods are bound (or never will be): the next on its nodes may go."""
        self.mine.set()


class NodeTurns:
    """The last gang planned on each node whose pods are not bound yet."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, asyncio.Event] = {}

    def take(self, nodes: Iterable[str]) -> Turn:
        """The turn of a gang planned now on ``nodes``: after every gang planned before it on one of them."""
        names = set(nodes)
        before = {id(e): e for n in names if (e := self._last.get(n)) is not None and not e.is_set()}
        mine = asyncio.Event()
        for name in names:
            self._last[name] = mine
        for name in [n for n, e in self._last.items() if e.is_set()]:
            del self._last[name]  # nothing to wait for there any more
        return Turn(tuple(before.values()), mine)

    def __len__(self) -> int:
        return len(self._last)
