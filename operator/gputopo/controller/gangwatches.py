"""The watches of gangs gputopo places without owning them: their pods, the objects they belong to, their records.

Pods of any gang (a PodGroup's, an Indexed Job's, a JobSet's, a LeaderWorkerSet's, a PyTorchJob's, a Kueue pod
group's, bare pods naming their gang), the owners that declare the gangs' sizes and shapes, and gputopo's own
GangPlacement records. Each object is trimmed as it is read to what reading a gang needs, never kept whole; a pod
is kept only while it is a candidate (gated by ``gputopo.io/placement``, annotated ``gputopo.io/gang`` or naming a
PodGroup its user wrote, and not a TrainingJob's), and let go when it stops being one. Pods cannot be selected by
their gates on the server, so all pods are watched and the rest are dropped as they are parsed.

An API the server does not serve (a CRD not installed, PodGroups before Kubernetes 1.37) is no error: its map stays
empty. Discovery is asked again every ``DISCOVERY_RECHECK_SECONDS``, so a CRD installed later is watched from then
on, and one removed is let go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from gputopo.api import group
from gputopo.api.group import LABEL_JOB
from gputopo.gangs.model import GATE
from gputopo.gangs.sources.podgroup import user_group
from gputopo.gangs.unbound import GROUP_CONDITIONS
from gputopo.kube.client import (
    GANG_PLACEMENT_GROUP,
    GANG_PLACEMENT_PLURAL,
    GANG_PLACEMENT_VERSION,
    KubeClient,
)
from gputopo.kube.errors import ApiError
from gputopo.kube.reflector import Reflector, Rhythm

__all__ = [
    "DISCOVERY_RECHECK_SECONDS",
    "GANG_KINDS",
    "SYNC_SECONDS",
    "GangKind",
    "GangWatches",
    "Keyed",
    "trim_gang_placement",
    "trim_job",
    "trim_owner",
    "trim_pod",
    "trim_pod_group",
]

logger = logging.getLogger("gputopo.controller")

Key = tuple[str, str]  # (namespace, name)
Trimmed = Mapping[str, Any]

# The annotation gputopo sets on every pod it steers (its gang): a steered pod stays a candidate.
ANNOTATION_GANG: Final = group.ANNOTATION_GANG
# How often APIs not served (or served) are asked about again.
DISCOVERY_RECHECK_SECONDS: Final = 180.0
# How long starting waits for a kind's first list: one that cannot be listed (no RBAC for a CRD installed later
# than the chart) must not keep the operator from starting; its map stays empty and ``synced`` says so.
SYNC_SECONDS: Final = 60.0

_META: Final = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences", "generation")
_POD_META: Final = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
    "generateName",
)
_POD_SPEC: Final = (
    "schedulingGates",
    "nodeName",
    "schedulingGroup",
    "affinity",
    "nodeSelector",
    "tolerations",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "resourceClaims",
    "terminationGracePeriodSeconds",
    "subdomain",
    "hostname",
)
# A pod template's spec, in an owner: what gives a rank its GPUs and its node constraints.
_TEMPLATE_SPEC: Final = ("affinity", "nodeSelector", "tolerations", "priorityClassName", "resourceClaims")
_JOB_SPEC: Final = ("parallelism", "completions", "completionMode", "scheduling")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: source[k] for k in keys if source.get(k) is not None}


def _containers(value: object, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [_pick(c, keys) for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []


def _with_containers(spec: Mapping[str, Any], keys: tuple[str, ...], kept: dict[str, Any]) -> dict[str, Any]:
    for field in ("containers", "initContainers"):
        if isinstance(spec.get(field), list):
            kept[field] = _containers(spec[field], keys)
    return kept


def _pod_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template: its labels and annotations, and of its spec the containers' resources and the node
    constraints."""
    meta, spec = _mapping(template.get("metadata")), _mapping(template.get("spec"))
    kept = _with_containers(spec, ("name", "resources"), _pick(spec, _TEMPLATE_SPEC))
    return {"metadata": _pick(meta, ("labels", "annotations")), "spec": kept}


def _is_pod_template(value: Mapping[str, Any]) -> bool:
    return isinstance(_mapping(value.get("spec")).get("containers"), list)


def _trim_templates(value: Any) -> Any:
    """``value`` with every pod template in it trimmed, wherever it is (a JobSet's replicated jobs, a
    LeaderWorkerSet's leader and worker templates, a PyTorchJob's replica specs)."""
    if isinstance(value, Mapping):
        if _is_pod_template(value):
            return _pod_template(value)
        return {k: _trim_templates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trim_templates(v) for v in value]
    return value


def _gated(spec: Mapping[str, Any]) -> bool:
    gates = spec.get("schedulingGates")
    return isinstance(gates, list) and any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def trim_pod(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a gang reader needs of a pod, or None when the pod is no gang's candidate: neither gated by
    ``gputopo.io/placement``, annotated ``gputopo.io/gang`` nor naming a PodGroup its user wrote (``user_group``), or
    a TrainingJob's own."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    if LABEL_JOB in _mapping(meta.get("labels")):
        return None
    if not _gated(spec) and ANNOTATION_GANG not in _mapping(meta.get("annotations")) and not user_group(obj):
        return None  # an ungated pod naming a PodGroup its user wrote is kept: its gang counts it (``is_bystander``)
    status = _mapping(obj.get("status"))
    kept: dict[str, Any] = {"phase": status["phase"]} if status.get("phase") is not None else {}
    conditions = status.get("conditions")
    scheduled = [
        c for c in (conditions if isinstance(conditions, list) else []) if _mapping(c).get("type") == "PodScheduled"
    ]
    if scheduled:
        kept["conditions"] = scheduled  # whether kube-scheduler finds a steered pod unschedulable, and since when
    return {
        "metadata": _pick(meta, _POD_META),
        "spec": _with_containers(spec, ("name", "resources", "env"), _pick(spec, _POD_SPEC)),
        "status": kept,
    }


def trim_job(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a gang reader needs of a batch/v1 Job, or None for a plain Job (not Indexed, no owner, no
    ``spec.scheduling``), which is no gang."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    if spec.get("completionMode") != "Indexed" and not meta.get("ownerReferences") and spec.get("scheduling") is None:
        return None
    kept = _pick(spec, _JOB_SPEC)
    if isinstance(spec.get("template"), Mapping):
        kept["template"] = _pod_template(spec["template"])
    return {"metadata": _pick(meta, _META), "spec": kept}


def trim_owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a gang reader needs of a PodGroup, JobSet, LeaderWorkerSet or PyTorchJob: its metadata and its spec,
    each pod template in it trimmed."""
    return {"metadata": _pick(_mapping(obj.get("metadata")), _META), "spec": _trim_templates(_mapping(obj.get("spec")))}


def trim_pod_group(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A PodGroup as ``trim_owner`` keeps it, with kube-scheduler's condition on it (``gangs.unbound``): why the
    group is not scheduled reaches its gang's status."""
    kept = trim_owner(obj)
    conditions = _mapping(obj.get("status")).get("conditions")
    scheduled = [
        c for c in (conditions if isinstance(conditions, list) else []) if _mapping(c).get("type") in GROUP_CONDITIONS
    ]
    if scheduled:
        kept["status"] = {"conditions": scheduled}
    return kept


def trim_gang_placement(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A GangPlacement, gputopo's own record: its metadata, spec and status."""
    meta = _pick(_mapping(obj.get("metadata")), (*_META, "creationTimestamp", "deletionTimestamp"))
    return {"metadata": meta, "spec": dict(_mapping(obj.get("spec"))), "status": dict(_mapping(obj.get("status")))}


@dataclass(frozen=True, slots=True)
class GangKind:
    """One kind the gang watches read: where it is served and how it is trimmed. ``always``: served by every
    Kubernetes gputopo supports (no discovery needed)."""

    kind: str
    group: str
    version: str
    plural: str
    trim: Callable[[Mapping[str, Any]], dict[str, Any] | None]
    always: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}" if self.group else f"/api/v1/{self.plural}"


PODS: Final = GangKind("Pods", "", "v1", "pods", trim_pod, always=True)
JOBS: Final = GangKind("Jobs", "batch", "v1", "jobs", trim_job, always=True)
POD_GROUPS: Final = GangKind("PodGroups", "scheduling.k8s.io", "v1beta1", "podgroups", trim_pod_group)
JOB_SETS: Final = GangKind("JobSets", "jobset.x-k8s.io", "v1alpha2", "jobsets", trim_owner)
LEADER_WORKER_SETS: Final = GangKind(
    "LeaderWorkerSets", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", trim_owner
)
PYTORCH_JOBS: Final = GangKind("PyTorchJobs", "kubeflow.org", "v1", "pytorchjobs", trim_owner)
GANG_PLACEMENTS: Final = GangKind(
    "GangPlacements", GANG_PLACEMENT_GROUP, GANG_PLACEMENT_VERSION, GANG_PLACEMENT_PLURAL, trim_gang_placement
)
GANG_KINDS: Final = (PODS, JOBS, POD_GROUPS, JOB_SETS, LEADER_WORKER_SETS, PYTORCH_JOBS, GANG_PLACEMENTS)


class _Watch:
    """One kind's reflector while the kind is served (None while it is not), and its task."""

    __slots__ = ("kind", "reflector", "served", "task")

    def __init__(self, kind: GangKind) -> None:
        self.kind = kind
        self.served: bool | None = None  # None: not asked yet, or discovery failed before it could say
        self.reflector: Reflector[dict[str, Any]] | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def items(self) -> Mapping[str, Trimmed]:
        return self.reflector.items if self.reflector is not None else {}


class Keyed(Mapping[Key, Trimmed]):
    """A kind's trimmed objects by (namespace, name), read through to its watch (empty while it is not served)."""

    __slots__ = ("_watch",)

    def __init__(self, watch: _Watch) -> None:
        self._watch = watch

    def __getitem__(self, key: Key) -> Trimmed:
        namespace, name = key
        return self._watch.items[f"{namespace}/{name}"]

    def __iter__(self) -> Iterator[Key]:
        for qualified in list(self._watch.items):
            namespace, _, name = qualified.partition("/")
            yield (namespace, name)

    def __len__(self) -> int:
        return len(self._watch.items)

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 2):
            return False
        return f"{key[0]}/{key[1]}" in self._watch.items


class GangWatches:
    """The gang watches, as maps by (namespace, name): ``pods`` (candidates only), ``pod_groups``, ``jobs``
    (gangs' Jobs only), ``job_sets``, ``leader_worker_sets``, ``pytorch_jobs`` and ``gang_placements``. Each change
    of what is kept calls ``poke`` (``poke_soon`` for the GangPlacements: gputopo's own writes come back there).

    ``async with`` starts the watches of the kinds served and returns once each has listed its kind once."""

    def __init__(
        self,
        client: KubeClient,
        poke: Callable[[], None],
        *,
        poke_soon: Callable[[], None] | None = None,
        page_size: int = 100,
        recheck_seconds: float = DISCOVERY_RECHECK_SECONDS,
        sync_seconds: float = SYNC_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client, self.poke = client, poke
        self.poke_soon = poke_soon or poke
        self.recheck_seconds, self.sync_seconds = recheck_seconds, sync_seconds
        self._rhythm = Rhythm(page_size=page_size)
        self._sleep = sleep
        self._watches = {kind.plural: _Watch(kind) for kind in GANG_KINDS}
        self.pods = Keyed(self._watches[PODS.plural])
        self.jobs = Keyed(self._watches[JOBS.plural])
        self.pod_groups = Keyed(self._watches[POD_GROUPS.plural])
        self.job_sets = Keyed(self._watches[JOB_SETS.plural])
        self.leader_worker_sets = Keyed(self._watches[LEADER_WORKER_SETS.plural])
        self.pytorch_jobs = Keyed(self._watches[PYTORCH_JOBS.plural])
        self.gang_placements = Keyed(self._watches[GANG_PLACEMENTS.plural])
        self._recheck: asyncio.Task[None] | None = None

    def served(self, plural: str) -> bool:
        """Whether the kind of ``plural`` ("jobsets", ...) is watched now (its API served)."""
        return self._watches[plural].reflector is not None

    @property
    def synced(self) -> bool:
        """Whether every kind watched has been listed once."""
        return all(w.reflector.synced.is_set() for w in self._watches.values() if w.reflector is not None)

    # -- discovery --------------------------------------------------------------------------------------------

    async def discover(self) -> list[Reflector[dict[str, Any]]]:
        """Ask which kinds are served; start the watches of those newly served, stop (and forget) those no longer
        served. Returns the reflectors started. An error asking about a kind leaves it as it was."""
        started = []
        for watch in self._watches.values():
            kind = watch.kind
            if kind.always:
                served = True
            else:
                try:
                    served = await self.client.serves(kind.group, kind.version, kind.plural)
                except ApiError as exc:
                    logger.warning(
                        "%s (%s): discovery failed; asking again later: %s", kind.kind, kind.api_version, exc
                    )
                    continue
            if served and watch.reflector is None:
                if watch.served is not None or not kind.always:
                    logger.info("%s (%s) are served: watching them", kind.kind, kind.api_version)
                started.append(self._start(watch))
            elif not served and watch.reflector is not None:
                logger.info("%s (%s) are no longer served: not watching them", kind.kind, kind.api_version)
                await self._stop(watch)
            elif not served and watch.served is None:
                logger.info(
                    "%s (%s) are not served: not watched (asked again every %.0fs)",
                    kind.kind,
                    kind.api_version,
                    self.recheck_seconds,
                )
            watch.served = served
        return started

    def _start(self, watch: _Watch) -> Reflector[dict[str, Any]]:
        kind = watch.kind
        trim = kind.trim
        parse: Callable[[str, Mapping[str, Any], dict[str, Any] | None], dict[str, Any] | None]
        parse, on_change = (lambda _, obj, __: trim(obj)), self.poke
        if kind is GANG_PLACEMENTS:
            on_change = self.poke_soon  # gputopo's own records: a pass already holds what its writes left
        if kind is PODS:
            parse, on_change = self._pod_news()
        reflector: Reflector[dict[str, Any]] = Reflector(
            self.client,
            kind.kind,
            kind.path,
            parse,
            on_change=on_change,
            namespaced=True,
            rhythm=self._rhythm,
        )
        watch.reflector = reflector
        watch.task = asyncio.create_task(reflector.run(), name=f"watch {kind.kind}")
        return reflector

    def _pod_news(
        self,
    ) -> tuple[Callable[[str, Mapping[str, Any], dict[str, Any] | None], dict[str, Any] | None], Callable[[], None]]:
        """The pods' parse and change callback: a change to a pod gputopo already steered (bound, Running) is news
        that cannot change a plan (``poke_soon``); a pod that waits on the gate, or one gone, is news at once."""
        urgent = [True]

        def parse(_: str, obj: Mapping[str, Any], __: dict[str, Any] | None) -> dict[str, Any] | None:
            kept = trim_pod(obj)
            steered = kept is not None and not _gated(_mapping(kept.get("spec")))
            urgent[0] = not steered
            return kept

        def changed() -> None:
            (self.poke if urgent[0] else self.poke_soon)()
            urgent[0] = True  # a deletion parses nothing: it is news at once

        return parse, changed

    async def _stop(self, watch: _Watch) -> None:
        task, had = watch.task, bool(watch.items)
        watch.reflector, watch.task = None, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if had:
            self.poke()

    async def _recheck_forever(self) -> None:
        while True:
            await self._sleep(self.recheck_seconds)
            try:
                await self.discover()  # what it starts lists on its own; a pass reads it once there (``synced``)
            except Exception:  # discovery must never stop: a CRD installed later would go unseen
                logger.exception("gang watches: discovery failed")

    # -- lifetime ---------------------------------------------------------------------------------------------

    async def __aenter__(self) -> GangWatches:
        started = await self.discover()
        self._recheck = asyncio.create_task(self._recheck_forever(), name="gang watches discovery")
        try:
            await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in started)), self.sync_seconds)
        except TimeoutError:
            late = ", ".join(r.kind for r in started if not r.synced.is_set())
            logger.warning("gang watches: %s not listed after %.0fs; going on without them", late, self.sync_seconds)
        logger.info(
            "watching gangs: %d candidate pods, %d Jobs of gangs; not served: %s",
            len(self.pods),
            len(self.jobs),
            ", ".join(w.kind.kind for w in self._watches.values() if w.reflector is None) or "none",
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        tasks = [t for t in (self._recheck, *(w.task for w in self._watches.values())) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._recheck = None
        for watch in self._watches.values():
            watch.reflector, watch.task = None, None
