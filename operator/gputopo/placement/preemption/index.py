"""What preemption reads from a pass's cluster, worked out once and shared by every preemptor of the pass.

The snapshot with every nomination held, each running gang's freeable GPUs per node (GPUs nominated to a
preemptor are never freed again for another), and per-node slot costs for the bounds, memoised per set of
rules (a pass's ``now`` and the preemptor's priority decide which gangs are victims).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from gputopo.placement.preemption.bounds import NodeVictims
from gputopo.placement.preemption.gangs import Nomination, RunningGang
from gputopo.placement.preemption.nominations import hold_nominations
from gputopo.placement.types import Snapshot

__all__ = ["RunningIndex"]


class RunningIndex:
    """The running gangs of one snapshot by node; ``k`` numbers ``running``, ``i`` the snapshot's nodes."""

    def __init__(self, snapshot: Snapshot, running: Iterable[RunningGang], nominations: Iterable[Nomination] = ()):
        self.nominations = tuple(nominations)
        self.nominated = {n.preemptor for n in self.nominations}
        self.snapshot = hold_nominations(snapshot, self.nominations)
        self.running = tuple(running)
        held: dict[str, set[int]] = {}
        for nomination in self.nominations:
            for node, gpus in nomination.gpus.items():
                held.setdefault(node, set()).update(gpus)
        snap = self.snapshot
        position = snap.index_of
        self.on_node: dict[int, list[tuple[int, frozenset[int]]]] = {}
        self.nodes_of: list[tuple[int, ...]] = []
        self.sizes: list[int] = []
        # What a preemption at ``now`` loses is ``sizes[k] * (now - since[k])`` (``RunningGang.work_lost``).
        self.since = [
            g.start_time if g.checkpoint_time is None else max(g.start_time, g.checkpoint_time) for g in self.running
        ]
        on_node, nodes_of, sizes = self.on_node, self.nodes_of, self.sizes
        for k, gang in enumerate(self.running):
            workers = gang.placement.workers
            if len(workers) == 1 and not held:  # most gangs: one worker, nothing held
                worker = workers[0]
                sizes.append(len(worker.gpus))
                try:
                    i = position(worker.node)
                except KeyError:
                    nodes_of.append(())
                    continue
                if worker.gpus:
                    on_node.setdefault(i, []).append((k, frozenset(worker.gpus)))
                    nodes_of.append((i,))
                else:
                    nodes_of.append(())
                continue
            per: dict[int, set[int]] = {}
            size = 0
            for worker in workers:
                size += len(worker.gpus)
                if worker.node in snap:
                    per.setdefault(position(worker.node), set()).update(worker.gpus)
            nodes = []
            for i, taken in per.items():
                freeable = frozenset(taken.difference(held.get(snap.nodes[i].name, ())))
                if freeable:
                    on_node.setdefault(i, []).append((k, freeable))
                    nodes.append(i)
            nodes_of.append(tuple(nodes))
            sizes.append(size)
        self.free = [max(0, n.topology.gpu_count - len(n.used_gpus)) for n in self.snapshot.nodes]
        self.plain = [n.ready and n.schedulable and not n.taints for n in self.snapshot.nodes]
        self.free_total = sum(self.free)
        self._slots: dict[Hashable, dict[int, NodeVictims]] = {}

    def slot_memo(self, key: Hashable) -> dict[int, NodeVictims]:
        """Per node, its victims' slot costs under the rules ``key`` names (kept for the pass)."""
        return self._slots.setdefault(key, {})
