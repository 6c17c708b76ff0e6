"""Kueue pod groups (sigs.k8s.io/kueue v0.17.0 ``pkg/controller/jobs/pod/constants/constants.go``): the label
``kueue.x-k8s.io/pod-group-name`` names the group, the annotation ``kueue.x-k8s.io/pod-group-total-count`` its
size. A pod's index is the label ``kueue.x-k8s.io/pod-group-pod-index`` (Kueue's webhook copies it from the
label the annotation ``kueue.x-k8s.io/pod-group-pod-index-label`` names).

Kueue holds the pods behind its own gates (``kueue.x-k8s.io/admission`` until the group is admitted, and
``kueue.x-k8s.io/topology`` for TAS flavors): gputopo waits for them (``Member.held_elsewhere``), and leaves the
pods of a TAS flavor to Kueue (``gputopo.gangs.kueuemarks``).
"""

from __future__ import annotations

from typing import Final

from gputopo.gangs.annotations import read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    bare_claim,
    group_size,
    labels_of,
    namespace_of,
    own_gpus,
)
from gputopo.gangs.kueuemarks import ADMISSION_GATE, TOPOLOGY_GATE
from gputopo.gangs.model import Declared, GangId

__all__ = [
    "ADMISSION_GATE",
    "GROUP_NAME_LABEL",
    "POD_INDEX_LABEL",
    "POD_INDEX_LABEL_ANNOTATION",
    "SOURCE",
    "TOPOLOGY_GATE",
    "TOTAL_COUNT_ANNOTATION",
    "claim",
]

SOURCE: Final = "kueue"
GROUP_NAME_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
POD_INDEX_LABEL: Final = "kueue.x-k8s.io/pod-group-pod-index"
POD_INDEX_LABEL_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-pod-index-label"


def claim(pod: Raw, owners: Owners) -> Claim | None:
    labels = labels_of(pod)
    name = labels.get(GROUP_NAME_LABEL, "").strip()
    if not name:
        return None
    annotations = annotations_of(pod)
    pod_needs = read_needs(annotations)
    problems = list(pod_needs.problems)
    rank = as_int(labels.get(POD_INDEX_LABEL))
    if rank is None and annotations.get(POD_INDEX_LABEL_ANNOTATION):
        rank = as_int(labels.get(annotations[POD_INDEX_LABEL_ANNOTATION]))
    size = group_size(annotations.get(TOTAL_COUNT_ANNOTATION), f"annotation {TOTAL_COUNT_ANNOTATION}", problems)
    declared = Declared(size, (own_gpus(pod, problems, owners),) * size) if size else None
    gang = GangId(namespace_of(pod), SOURCE, name)
    return bare_claim(pod, gang, rank, declared, pod_needs, problems, uniform=declared is not None)
