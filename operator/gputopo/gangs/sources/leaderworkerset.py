"""LeaderWorkerSets (kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``): one gang per group.

The leader StatefulSet ``<lws>`` creates leader pods ``<lws>-<group>``; once a leader exists (and is Ready under
the ``LeaderReady`` startup policy) a worker StatefulSet ``<lws>-<group>`` creates ``<lws>-<group>-<worker>``.
LWS's pod webhook labels them with ``leaderworkerset.sigs.k8s.io/name``, ``group-index`` and ``worker-index``
(the leader is worker 0) and annotates ``leaderworkerset.sigs.k8s.io/size``. The gang is named
``<lws>-<group>``; rank 0 takes the leader template's shape (the worker template's when there is none), the other
ranks the worker template's. ``leaderworkerset.sigs.k8s.io/exclusive-topology`` keeps each group in a domain of
that label (LWS's own pod affinities), which is the gang's required domain.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from gputopo.gangs.annotations import read_needs
from gputopo.gangs.claims import (
    Claim,
    Owners,
    Raw,
    annotations_of,
    as_int,
    bounded,
    labels_of,
    mapping,
    namespace_of,
    own_gpus,
    owner_body,
    pod_priority,
    template_gpus,
    text,
)
from gputopo.gangs.model import Declared, GangId, OwnerRef

__all__ = [
    "EXCLUSIVE_KEY",
    "GROUP_INDEX_LABEL",
    "NAME_LABEL",
    "SIZE_ANNOTATION",
    "SOURCE",
    "WORKER_INDEX_LABEL",
    "claim",
]

SOURCE: Final = "leaderworkerset"
API_VERSION: Final = "leaderworkerset.x-k8s.io/v1"
NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/size"
EXCLUSIVE_KEY: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"


def claim(pod: Raw, owners: Owners) -> Claim | None:
    labels = labels_of(pod)
    name = labels.get(NAME_LABEL, "")
    group = as_int(labels.get(GROUP_INDEX_LABEL))
    if not name or group is None:
        return None
    namespace = namespace_of(pod)
    annotations = annotations_of(pod)
    pod_needs = read_needs(annotations)
    problems = list(pod_needs.problems)
    worker = as_int(labels.get(WORKER_INDEX_LABEL))
    if worker is None:
        problems.append(f"label {WORKER_INDEX_LABEL}: {labels.get(WORKER_INDEX_LABEL)!r} is not a worker index")
    lws = owner_body(owners.leaderworkersets, namespace, name)
    owner = OwnerRef(API_VERSION, "LeaderWorkerSet", name, "")
    size = as_int(annotations.get(SIZE_ANNOTATION))
    uniform = True
    shape: tuple[int, ...] = ()
    if lws is not None:
        owner = replace(owner, uid=text(mapping(lws.get("metadata")).get("uid")))
        template = mapping(mapping(lws.get("spec")).get("leaderWorkerTemplate"))
        declared_size = as_int(template.get("size"))
        where = f"LeaderWorkerSet {namespace}/{name}"
        size = bounded(1 if declared_size is None else declared_size, f"{where}: size", problems)
        worker_gpus = template_gpus(
            template.get("workerTemplate"), f"{where}: workerTemplate", problems, owners, namespace
        )
        leader = template.get("leaderTemplate")
        leader_gpus = (
            template_gpus(leader, f"{where}: leaderTemplate", problems, owners, namespace) if leader else worker_gpus
        )
        shape = (leader_gpus, *((worker_gpus,) * (size - 1))) if size else ()
        uniform = False
    elif size:
        shape = (own_gpus(pod, problems, owners),) * size
    declared = None
    if size:
        declared = Declared(size, shape, ("leader", *(("worker",) * (size - 1))))
    elif size == 0 or lws is None:
        problems.append(f"annotation {SIZE_ANNOTATION}: {annotations.get(SIZE_ANNOTATION)!r} is not a group size")
    key = annotations.get(EXCLUSIVE_KEY)
    needs = replace(pod_needs.needs, required_label=key) if key else pod_needs.needs
    return Claim(
        GangId(namespace, SOURCE, f"{name}-{group}"),
        worker,
        role="" if worker is None else "leader" if worker == 0 else "worker",
        declared=declared,
        needs=needs,
        priority=pod_priority(pod),
        owner=owner,
        evict_bare=pod_needs.evict_bare,
        problems=tuple(problems),
        uniform=uniform and declared is not None,
    )
