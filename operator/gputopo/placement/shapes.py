"""A gang of several GPU shapes placed as one: a request per shape, placed in turn on one snapshot.

The engine places a homogeneous gang (``workers`` of ``gpus_per_worker`` GPUs each). A gang of several shapes (a
role of 8-GPU ranks beside one of 4) is placed a shape at a time, each after the earlier ones are reserved, with
the first shape's tier as the preferred tier of the rest where they prefer none. The placements combine into one
whose workers carry the gang's own ranks and whose estimate is its worst shape's. ``plan_gang`` and the
preemption search both place a gang so, so their plans and estimates agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gputopo.placement.gang import spanning_tier
from gputopo.placement.types import Placement, Policy, Request, Snapshot, Unplaceable

__all__ = ["Shape", "combine", "following", "place_shapes", "ranked"]


@dataclass(frozen=True, slots=True)
class Shape:
    """Ranks of a gang placed by one request: ``ranks`` are the gang's ranks of the request's workers, in order;
    ``label`` names them in a bottleneck or refusal (by default their span and shape).

    ``part`` is the exclusive part its ranks belong to (a JobSet's child Job), and ``exclusive`` the node label
    whose domains the gang's parts take one each, no two parts one domain (its exclusive topology); both empty for
    ranks that may go anywhere. ``place_shapes`` places shapes on the snapshot it is given and reads neither:
    ``plan_gang`` and ``plan_exclusive_preemption`` choose each part's domain."""

    request: Request
    ranks: tuple[int, ...]
    label: str = ""
    part: str = ""
    exclusive: str = ""

    def __str__(self) -> str:
        if self.label:
            return self.label
        first, last = self.ranks[0], self.ranks[-1]
        span = f"rank {first}" if first == last else f"ranks {first}-{last}"
        return f"{span} ({self.request.gpus_per_worker} GPUs each)"


def ranked(placement: Placement, ranks: Sequence[int]) -> Placement:
    """The placement with its workers numbered by ``ranks``, in order."""
    workers = tuple(replace(w, rank=r) for w, r in zip(placement.workers, ranks, strict=True))
    return replace(placement, workers=workers)


def following(request: Request, placed: Sequence[Placement]) -> Request:
    """A later shape's request: the first shape's tier is its preferred tier where it prefers none."""
    if request.preferred_tier is not None or not placed:
        return request
    return replace(request, preferred_tier=placed[0].tier)


def combine(snapshot: Snapshot, parts: Sequence[tuple[str, Placement]]) -> Placement:
    """One placement of every part's workers (by rank): the worst part's estimate, named by its label when there
    are several, and the tier that spans them all. ``parts`` pairs each placement with the label of its ranks."""
    workers = tuple(sorted((w for _, p in parts for w in p.workers), key=lambda w: w.rank))
    if not workers:
        return Placement((), 0.0, "no rank asks for GPUs")
    label, worst = min(parts, key=lambda part: part[1].busbw_gbps)
    bottleneck = worst.bottleneck if len(parts) == 1 else f"{label}: {worst.bottleneck}"
    tier, domain = spanning_tier(snapshot, sorted({snapshot.index_of(w.node) for w in workers}))
    top = tier >= len(snapshot.tiers)
    return Placement(workers, worst.busbw_gbps, bottleneck, None if top else tier, domain)


def place_shapes(snapshot: Snapshot, shapes: Sequence[Shape], place: Policy) -> Placement | Unplaceable:
    """Every shape placed in turn on the snapshot, each after the earlier ones are reserved, as one placement;
    or the refusal of the first shape that does not fit, named."""
    current = snapshot
    placed: list[Placement] = []
    for shape in shapes:
        found = place(current, following(shape.request, placed))
        if isinstance(found, Unplaceable):
            return Unplaceable(f"{shape}: {found.reason}", found.details)
        found = ranked(found, shape.ranks)
        current = current.reserve(found)
        placed.append(found)
    return combine(snapshot, [(str(s), p) for s, p in zip(shapes, placed, strict=True)])
