"""Reading the live cluster for ``kubectl gputopo`` and the map: one paged list of each kind the operator
watches, through ``gputopo.kube``'s client with the user's kubeconfig and RBAC, then the operator's own parsing
(``gputopo.control.explain.live_cluster``). A kind the cluster does not serve (no Kueue, no GangPlacement CRD
yet) or the user may not list reads as none, and is named in ``LiveRead.unread``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gputopo.api.group import GROUP, VERSION
from gputopo.control.explain import LiveCluster, LiveObjects, live_cluster
from gputopo.kube.client import KubeClient, load_configuration
from gputopo.kube.errors import ApiError
from gputopo.placement.types import DEFAULT_TIERS, TierConfig

__all__ = ["KINDS", "LiveRead", "list_all", "read_live", "read_objects"]

_PAGE = "500"

# field of LiveObjects -> (what, list path)
KINDS: dict[str, tuple[str, str]] = {
    "nodes": ("Nodes", "/api/v1/nodes"),
    "topologies": ("NodeTopologies", f"/apis/{GROUP}/{VERSION}/nodetopologies"),
    "pods": ("Pods", "/api/v1/pods"),
    "jobs": ("TrainingJobs", f"/apis/{GROUP}/{VERSION}/trainingjobs"),
    "gangs": ("GangPlacements", f"/apis/{GROUP}/{VERSION}/gangplacements"),
    "priority_classes": ("PriorityClasses", "/apis/scheduling.k8s.io/v1/priorityclasses"),
    "pod_gpus": ("NodePodGpus", f"/apis/{GROUP}/{VERSION}/nodepodgpus"),
}
_REQUIRED = ("nodes", "topologies")


@dataclass(frozen=True, slots=True)
class LiveRead:
    cluster: LiveCluster
    unread: dict[str, str] = field(default_factory=dict)  # kind -> why it could not be listed


async def list_all(client: KubeClient, what: str, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    params = {"limit": _PAGE}
    while True:
        page = await client.get(f"list {what}", path, params)
        items += [i for i in page.get("items") or () if isinstance(i, dict)]
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        params = {"limit": _PAGE, "continue": str(token)}


async def read_objects(client: KubeClient) -> tuple[LiveObjects, dict[str, str]]:
    """Every kind listed at once; a kind that cannot be read is empty (and said why), except Nodes and
    NodeTopologies, without which there is no map: their error is raised."""
    fields = list(KINDS)
    results = await asyncio.gather(*(list_all(client, *KINDS[f]) for f in fields), return_exceptions=True)
    found: dict[str, list[dict[str, Any]]] = {}
    unread: dict[str, str] = {}
    for name, result in zip(fields, results, strict=True):
        if isinstance(result, ApiError):
            if name in _REQUIRED:
                raise result
            unread[KINDS[name][0]] = str(result)
            found[name] = []
        elif isinstance(result, BaseException):
            raise result
        else:
            found[name] = result
    return LiveObjects(**found), unread


def read_live(kubeconfig: str | None = None, tiers: TierConfig = DEFAULT_TIERS) -> LiveRead:
    """The cluster in the kubeconfig, parsed; raises ``KubeError`` when it cannot be read."""

    async def read() -> tuple[LiveObjects, dict[str, str]]:
        client = KubeClient(load_configuration(kubeconfig), concurrency=8)
        try:
            return await read_objects(client)
        finally:
            await client.close()

    objects, unread = asyncio.run(read())
    return LiveRead(live_cluster(objects, tiers, datetime.now(UTC)), unread)
