"""Running gangs on a test snapshot: ``gang("a", 1).on("n0", 0, 1).started(10)``, then ``running(...)``."""

from __future__ import annotations

from dataclasses import replace

from gputopo.placement import Request, Snapshot
from gputopo.placement.preemption import PreemptionPolicy, Preemptor, RunningGang, held_placement
from gputopo.placement.shapes import Shape


class GangBuilder:
    def __init__(self, name: str, priority: int) -> None:
        self.name = name
        self.priority = priority
        self.workers: list[tuple[str, tuple[int, ...]]] = []
        self.fields: dict[str, object] = {}

    def on(self, node: str, *gpus: int) -> GangBuilder:
        """One worker on ``node`` holding ``gpus``."""
        self.workers.append((node, gpus))
        return self

    def on_each(self, nodes: list[str], *gpus: int) -> GangBuilder:
        for node in nodes:
            self.on(node, *gpus)
        return self

    def started(self, at: float) -> GangBuilder:
        self.fields["start_time"] = at
        return self

    def checkpointed(self, at: float) -> GangBuilder:
        self.fields["checkpoint_time"] = at
        return self

    def every(self, seconds: float) -> GangBuilder:
        """It checkpoints every ``seconds`` (its declared interval)."""
        self.fields["checkpoint_interval_s"] = seconds
        return self

    def min_runtime(self, seconds: float) -> GangBuilder:
        self.fields["min_runtime_s"] = seconds
        return self

    def non_preemptible(self) -> GangBuilder:
        self.fields["preemptible"] = False
        return self

    def preempted(self, at: float, by: str = "") -> GangBuilder:
        self.fields["preempted_at"] = at
        if by:
            self.fields["preempted_by"] = frozenset({by})
        return self


def gang(name: str, priority: int = 0) -> GangBuilder:
    return GangBuilder(name, priority)


def running(snapshot: Snapshot, *gangs: GangBuilder) -> tuple[Snapshot, list[RunningGang]]:
    """The snapshot with the gangs' GPUs taken, and the gangs."""
    out = []
    for builder in gangs:
        placement = held_placement(snapshot, builder.workers)
        snapshot = snapshot.reserve(placement)
        out.append(replace(RunningGang(builder.name, builder.priority, placement), **builder.fields))  # type: ignore[arg-type]
    return snapshot, out


def preemptor(
    workers: int,
    gpus: int,
    priority: int = 10,
    *,
    name: str = "p",
    required_tier: int | None = None,
    never: bool = False,
    preempted_by: frozenset[str] = frozenset(),
    checkpoint_wait: float = 0.0,
    waiting_since: float | None = None,
) -> Preemptor:
    request = Request(workers, gpus, name=name, required_tier=required_tier, same_model=False)
    policy = PreemptionPolicy.NEVER if never else PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    return Preemptor(
        request, priority, policy, preempted_by, checkpoint_wait_s=checkpoint_wait, waiting_since=waiting_since
    )


def shaped(
    *shapes: tuple[int, int], priority: int = 10, name: str = "p", required_tier: int | None = None
) -> Preemptor:
    """A gang of several GPU shapes, each ``(workers, gpus)``, ranked from 0 in turn: ``shaped((2, 8), (1, 4))``."""
    out: list[Shape] = []
    rank = 0
    for workers, gpus in shapes:
        request = Request(workers, gpus, name=name, required_tier=required_tier, same_model=False)
        out.append(Shape(request, tuple(range(rank, rank + workers))))
        rank += workers
    return Preemptor.of_shapes(tuple(out), priority)


def exclusive(
    label: str,
    *parts: tuple[int, int] | tuple[int, int, str],
    priority: int = 10,
    name: str = "p",
    never: bool = False,
    preempted_at: float | None = None,
    checkpoint_wait: float = 0.0,
) -> Preemptor:
    """A gang of exclusive parts over node label ``label``: each ``(workers, gpus)`` a part named ``<name>-<i>``, or
    ``(workers, gpus, part)`` (``""``: ranks outside every part), ranked from 0 in turn."""
    out: list[Shape] = []
    rank = 0
    for i, (workers, gpus, *named) in enumerate(parts):
        part = str(named[0]) if named else f"{name}-{i}"
        request = Request(workers, gpus, name=name, same_model=False)
        out.append(Shape(request, tuple(range(rank, rank + workers)), part=part, exclusive=label if part else ""))
        rank += workers
    policy = PreemptionPolicy.NEVER if never else PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    found = Preemptor.of_shapes(tuple(out), priority, policy, preempted_at=preempted_at)
    return replace(found, checkpoint_wait_s=checkpoint_wait)
