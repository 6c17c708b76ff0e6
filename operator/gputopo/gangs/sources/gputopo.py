"""gputopo's plain pod contract: bare pods (or pods of any controller) that name their gang themselves.

Labels ``gputopo.io/gang`` (the gang's name) and ``gputopo.io/gang-size`` (its all-or-nothing size); the rank
from ``gputopo.io/rank``, else the Indexed Job completion index. Every rank takes the pod's own GPU count
unless the annotation ``gputopo.io/gpus-per-rank`` lists them ("0,8,8,8").
"""

from __future__ import annotations

from typing import Final

from gputopo.api.fields import shown
from gputopo.api.group import LABEL_RANK
from gputopo.gangs.annotations import ANNOTATION_GPUS_PER_RANK, read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    bare_claim,
    completion_index,
    group_size,
    labels_of,
    namespace_of,
    own_gpus,
)
from gputopo.gangs.model import Declared, GangId

__all__ = ["LABEL_GANG", "LABEL_GANG_SIZE", "SOURCE", "claim"]

SOURCE: Final = "gputopo"
LABEL_GANG: Final = "gputopo.io/gang"
LABEL_GANG_SIZE: Final = "gputopo.io/gang-size"


def _shape(raw: str, size: int, problems: list[str]) -> tuple[int, ...] | None:
    parts = [p.strip() for p in raw.split(",")]
    counts = [as_int(p) for p in parts]
    if any(c is None for c in counts):
        problems.append(f"annotation {ANNOTATION_GPUS_PER_RANK}: {shown(raw)} is not a comma list of GPU counts")
        return None
    if len(counts) != size:
        problems.append(
            f"annotation {ANNOTATION_GPUS_PER_RANK}: {shown(raw)} names {len(counts)} ranks, the gang has {size}"
        )
        return None
    return tuple(c for c in counts if c is not None)


def claim(pod: Raw, owners: Owners) -> Claim | None:
    labels = labels_of(pod)
    name = labels.get(LABEL_GANG, "").strip()
    if not name:
        return None
    annotations = annotations_of(pod)
    pod_needs = read_needs(annotations)
    problems = list(pod_needs.problems)
    raw_rank = labels.get(LABEL_RANK)
    rank = as_int(raw_rank) if raw_rank is not None else completion_index(pod)
    if raw_rank is not None and rank is None:
        problems.append(f"label {LABEL_RANK}: {shown(raw_rank)} is not a rank (a whole number ≥ 0)")
    size = group_size(labels.get(LABEL_GANG_SIZE), f"label {LABEL_GANG_SIZE}", problems)
    declared = None
    if size:
        raw_shape = annotations.get(ANNOTATION_GPUS_PER_RANK)
        shape = _shape(raw_shape, size, problems) if raw_shape is not None else None
        if shape is None:  # the contract: every rank takes what the pod takes
            shape = (own_gpus(pod, problems, owners),) * size
        declared = Declared(size, shape)
    return bare_claim(pod, GangId(namespace_of(pod), SOURCE, name), rank, declared, pod_needs, problems)
