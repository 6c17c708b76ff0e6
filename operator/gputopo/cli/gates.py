"""Lifting gputopo's scheduling gate by hand: the break-glass when the operator is down, crash-looping or gone.

``ungate`` lists the pods held by ``gputopo.io/placement`` (all namespaces, one, or one gang of one) and removes
that gate alone from each, with a JSON patch whose ``test`` op checks the gate list it read: a gate another
controller added or lifted meanwhile is never overwritten (the pod is read again and tried once more). Every other
gate (Kueue's admission gate, say) stays. A pod so released is placed by kube-scheduler alone, without gputopo's
plan for its gang.

The selection and the patch are pure (``gated_pods``, ``lift_patch``); ``ungate`` talks to the API server through
``gputopo.kube``'s client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import quote

from gputopo.gangs.annotations import ANNOTATION_GANG
from gputopo.gangs.model import GATE
from gputopo.gangs.sources import gputopo as gputopo_source
from gputopo.gangs.sources import jobset, kueue, leaderworkerset, pytorchjob
from gputopo.kube.errors import ApiError, NotFoundError

__all__ = [
    "GangPod",
    "GatesClient",
    "UngateReport",
    "gang_names",
    "gated_pods",
    "lift_patch",
    "ungate",
]

# The labels that name a pod's gang, and the gang source each belongs to (gputopo.gangs.sources).
_GANG_LABELS: Final = (
    (gputopo_source.LABEL_GANG, gputopo_source.SOURCE),
    (kueue.GROUP_NAME_LABEL, kueue.SOURCE),
    (jobset.JOBSET_NAME_KEY, jobset.SOURCE),
    (pytorchjob.JOB_NAME_LABEL, pytorchjob.SOURCE),
    ("batch.kubernetes.io/job-name", "job"),
)
_PAGE: Final = "500"
_TRIES: Final = 2  # a pod whose gates changed between the read and the patch is read again once


class GatesClient(Protocol):
    """What ``ungate`` needs of ``gputopo.kube.client.KubeClient``."""

    async def get(self, what: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]: ...

    async def patch_pod_json(self, namespace: str, name: str, ops: Sequence[dict[str, Any]]) -> bool: ...


@dataclass(frozen=True, slots=True)
class GangPod:
    """A pod held by gputopo's gate, and the scheduling gates it had when read."""

    namespace: str
    name: str
    gates: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class UngateReport:
    """What ``ungate`` did: pods released (or, in a dry run, that would be), pods gone or no longer gated by
    gputopo meanwhile, and pods it could not release with the API server's reason."""

    dry_run: bool
    lifted: list[GangPod] = field(default_factory=list)
    left: list[GangPod] = field(default_factory=list)
    failed: list[tuple[GangPod, str]] = field(default_factory=list)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _gates(pod: Mapping[str, Any]) -> tuple[str, ...]:
    gates = _mapping(pod.get("spec")).get("schedulingGates")
    if not isinstance(gates, list):
        return ()
    return tuple(str(_mapping(g).get("name", "")) for g in gates)


def gang_names(pod: Mapping[str, Any]) -> frozenset[str]:
    """The names the pod's gang goes by, plain and as ``<source>/<name>`` (the form of the annotation
    gputopo.io/gang-id and of ``gputopo`` messages): its PodGroup, gputopo.io/gang label, Kueue pod group, JobSet,
    LeaderWorkerSet (``<name>-<group index>``), PyTorchJob or Job."""
    meta = _mapping(pod.get("metadata"))
    labels = _mapping(meta.get("labels"))
    named: set[tuple[str, str]] = set()
    group = _mapping(_mapping(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    if isinstance(group, str) and group:
        named.add(("podgroup", group))
    for label, source in _GANG_LABELS:
        value = labels.get(label)
        if isinstance(value, str) and value:
            named.add((source, value))
    lws, index = labels.get(leaderworkerset.NAME_LABEL), labels.get(leaderworkerset.GROUP_INDEX_LABEL)
    if isinstance(lws, str) and lws and isinstance(index, str) and index:
        named.add((leaderworkerset.SOURCE, f"{lws}-{index}"))
    names = {n for _, n in named} | {f"{s}/{n}" for s, n in named}
    steered = _mapping(meta.get("annotations")).get(ANNOTATION_GANG)
    if isinstance(steered, str) and steered:
        names |= {steered, steered.partition("/")[2] or steered}
    return frozenset(names)


def gated_pods(pods: Iterable[Mapping[str, Any]], gang: str | None = None) -> list[GangPod]:
    """The pods gputopo's gate holds (of ``gang`` only, when named), sorted by namespace and name; a pod being
    deleted is left out (its gate no longer matters)."""
    found: list[GangPod] = []
    for pod in pods:
        meta = _mapping(pod.get("metadata"))
        gates = _gates(pod)
        if GATE not in gates or meta.get("deletionTimestamp"):
            continue
        if gang is not None and gang not in gang_names(pod):
            continue
        found.append(GangPod(str(meta.get("namespace", "")), str(meta.get("name", "")), gates))
    return sorted(found, key=lambda p: (p.namespace, p.name))


def lift_patch(gates: Sequence[str]) -> list[dict[str, Any]]:
    """The JSON patch that removes gputopo's gate (every copy of it) from a pod whose gates are ``gates``, and
    applies only while they still are."""
    kept = [{"name": g} for g in gates if g != GATE]
    return [
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]},
        {"op": "replace", "path": "/spec/schedulingGates", "value": kept},
    ]


def _pods_path(namespace: str | None, name: str | None = None) -> str:
    where = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    return f"/api/v1{where}/pods" + (f"/{quote(name, safe='')}" if name else "")


async def _list(client: GatesClient, namespace: str | None) -> list[Mapping[str, Any]]:
    pods: list[Mapping[str, Any]] = []
    params = {"limit": _PAGE}
    while True:
        page = await client.get(f"list Pods in {namespace or 'all namespaces'}", _pods_path(namespace), params)
        pods.extend(_mapping(p) for p in page.get("items") or ())
        token = _mapping(page.get("metadata")).get("continue")
        if not token:
            return pods
        params = {"limit": _PAGE, "continue": str(token)}


async def _lift(client: GatesClient, pod: GangPod, report: UngateReport) -> None:
    current = pod
    for _ in range(_TRIES):
        if await client.patch_pod_json(current.namespace, current.name, lift_patch(current.gates)):
            report.lifted.append(current)
            return
        try:
            read = await client.get(f"get Pod {current}", _pods_path(current.namespace, current.name))
        except NotFoundError:
            report.left.append(current)
            return
        again = gated_pods([read])
        if not again:
            report.left.append(current)
            return
        current = again[0]
    report.failed.append((current, "its scheduling gates kept changing while being lifted; run ungate again"))


async def ungate(
    client: GatesClient, namespace: str | None = None, gang: str | None = None, dry_run: bool = False
) -> UngateReport:
    """Remove gputopo's gate from the pods it holds: in every namespace, in ``namespace``, or of ``gang`` there
    (a gang is named within one namespace). ``dry_run``: only say which pods would be released."""
    if gang is not None and not namespace:
        raise ValueError("a gang is named within a namespace: give the namespace with the gang")
    report = UngateReport(dry_run)
    pods = gated_pods(await _list(client, namespace), gang)
    if dry_run:
        report.lifted.extend(pods)
        return report
    for pod in pods:
        try:
            await _lift(client, pod, report)
        except ApiError as error:
            report.failed.append((pod, f"{error.status} {error.reason or error}".strip()))
    return report
