"""Where gangs are read from, one module per source, in the order ``read_gangs`` tries them.

Explicit declarations come first (a PodGroup, gputopo's plain pod contract, a Kueue pod group): a pod that makes
two of them naming different gangs is refused. Then the owner-derived sources, the first that knows the pod
wins: a JobSet's pods are Job pods too, and the JobSet is the gang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gputopo.gangs.claims import Claim, Owners, Raw
from gputopo.gangs.model import Source
from gputopo.gangs.sources import gputopo, job, jobset, kueue, leaderworkerset, podgroup, pytorchjob

__all__ = ["DERIVED", "EXPLICIT", "ClaimReader"]

ClaimReader = Callable[[Raw, Owners], Claim | None]

EXPLICIT: Final[tuple[tuple[Source, ClaimReader], ...]] = (
    ("podgroup", podgroup.claim),
    ("gputopo", gputopo.claim),
    ("kueue", kueue.claim),
)
DERIVED: Final[tuple[tuple[Source, ClaimReader], ...]] = (
    ("jobset", jobset.claim),
    ("leaderworkerset", leaderworkerset.claim),
    ("pytorchjob", pytorchjob.claim),
    ("job", job.claim),
)
