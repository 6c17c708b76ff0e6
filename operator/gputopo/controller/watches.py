"""The watches of the cluster's hardware: every Node, NodeTopology and NodePodGpus, as facts, for the loop.

They run with the control loop (on the leader only) and wake it when something it reads changes: a
Node's readiness, labels or taints (not its heartbeats), a NodeTopology's content (not its
``observedAt``), the pods a NodePodGpus lists (not its heartbeats). With ``dra`` they also watch every
ResourceSlice and every ResourceClaim (the devices kube-scheduler allocates from, and who holds them), and every
ResourceClaimTemplate, read as the GPUs it asks for (a foreign gang's pod gets its GPUs from one). Each
NodeTopology with new content is also handed to ``on_topology``, as read: the next pass's quarantine observes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from gputopo.api.group import GROUP, VERSION
from gputopo.control.dra import ClaimFacts, DraView, SliceFacts, claim_facts, slice_facts
from gputopo.control.facts import NodeFacts, PodGpusFacts, TopologyFacts, node_facts
from gputopo.control.phantoms import QuotaRoom, quota_room, quota_room_of
from gputopo.control.podgpus import pod_gpus_facts
from gputopo.control.priority import PriorityClassFacts, priority_class_facts
from gputopo.control.topologies import content_digest, topology_facts
from gputopo.gangs.claims import claim_template_gpus
from gputopo.kube.client import KubeClient, resource_path
from gputopo.kube.reflector import Reflector, Rhythm
from gputopo.topology.model import Topology

__all__ = ["ClusterWatches"]

logger = logging.getLogger("gputopo.controller")


class ClusterWatches:
    def __init__(
        self,
        client: KubeClient,
        poke: Callable[[], None],
        *,
        on_topology: Callable[[str, Topology], None] = lambda _, __: None,
        poke_soon: Callable[[], None] | None = None,
        page_size: int = 100,
        dra: bool = False,
    ) -> None:
        """``poke_soon`` (``poke`` if not given) hears news that cannot change a plan: pods' GPU reports,
        claims."""
        self.on_topology = on_topology
        soon = poke_soon or poke
        self._digests: dict[str, bytes] = {}
        group = f"/apis/{GROUP}/{VERSION}"
        rhythm = Rhythm(page_size=page_size)
        self.nodes: Reflector[NodeFacts] = Reflector(
            client, "Nodes", "/api/v1/nodes", self._node, on_change=poke, rhythm=rhythm
        )
        self.topologies: Reflector[TopologyFacts] = Reflector(
            client,
            "NodeTopologies",
            f"{group}/nodetopologies",
            self._topology,
            on_change=poke,
            on_delete=self._forget,
            rhythm=rhythm,
        )
        self.pod_gpus: Reflector[PodGpusFacts] = Reflector(
            client,
            "NodePodGpus",
            f"{group}/nodepodgpus",
            self._pod_gpus,
            on_change=soon,
            rhythm=rhythm,
        )
        self.priority_classes: Reflector[PriorityClassFacts] = Reflector(
            client,
            "PriorityClasses",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            self._priority_class,
            on_change=poke,
            rhythm=rhythm,
        )
        # Read only: how many more GPUs each namespace's quota admits (a gang of bare pods holds no more).
        self.quotas: Reflector[QuotaRoom] = Reflector(
            client,
            "ResourceQuotas",
            "/api/v1/resourcequotas",
            lambda _, obj, __: quota_room_of(obj),
            on_change=poke,
            rhythm=rhythm,
            namespaced=True,
        )
        self.slices: Reflector[SliceFacts] | None = None
        self.claims: Reflector[ClaimFacts] | None = None
        self.claim_templates: Reflector[int | str] | None = None
        if dra:
            self.slices = Reflector(
                client,
                "ResourceSlices",
                resource_path(None, "resourceslices"),
                lambda _, obj, __: slice_facts(obj),
                on_change=poke,
                rhythm=rhythm,
            )
            self.claims = Reflector(
                client,
                "ResourceClaims",
                resource_path(None, "resourceclaims"),
                lambda _, obj, __: claim_facts(obj),
                on_change=soon,
                rhythm=rhythm,
                namespaced=True,
            )
            self.claim_templates = Reflector(
                client,
                "ResourceClaimTemplates",
                resource_path(None, "resourceclaimtemplates"),
                lambda _, obj, __: claim_template_gpus(obj),
                on_change=poke,
                rhythm=rhythm,
                namespaced=True,
            )
        self._tasks: list[asyncio.Task[None]] = []

    def dra_view(self) -> DraView | None:
        """The devices and claims now; None when not watching them (device-plugin mode)."""
        if self.slices is None or self.claims is None:
            return None
        claims = {(c.namespace, c.name): c for c in self.claims.items.values()}
        return DraView(dict(self.slices.items), claims)

    def quota_room(self) -> dict[str, int]:
        """Each namespace's room for more GPUs under its ResourceQuotas (absent: no quota on GPUs)."""
        return quota_room(self.quotas.items.values())

    def claim_template_gpus(self) -> dict[tuple[str, str], int | str] | None:
        """Each ResourceClaimTemplate's GPU count (or why it has none) by (namespace, name); None when not
        watching them (device-plugin mode)."""
        if self.claim_templates is None:
            return None
        out: dict[tuple[str, str], int | str] = {}
        for key, gpus in self.claim_templates.items.items():
            namespace, _, name = key.partition("/")
            out[(namespace, name)] = gpus
        return out

    def _forget(self, name: str) -> None:
        self._digests.pop(name, None)

    @staticmethod
    def _node(name: str, obj: Mapping[str, Any], before: NodeFacts | None) -> NodeFacts:
        return node_facts(obj)  # equal facts (a heartbeat) are no change to the reflector: no poke

    def _topology(self, name: str, obj: Mapping[str, Any], before: TopologyFacts | None) -> TopologyFacts:
        status = obj.get("status")
        status = status if isinstance(status, Mapping) else {}
        digest = content_digest(status)
        if before is not None and self._digests.get(name) == digest:
            return before  # the same content (a resync): the same facts, the same model object
        facts = topology_facts({"metadata": {"name": name}, "status": dict(status)})
        self._digests[name] = digest
        if facts.topology is not None:
            self.on_topology(name, facts.topology)
        if facts.error:
            logger.warning("NodeTopology %s: %s", name, facts.error)
        return facts

    @staticmethod
    def _priority_class(
        name: str, obj: Mapping[str, Any], before: PriorityClassFacts | None
    ) -> PriorityClassFacts | None:
        facts = priority_class_facts(obj)
        if facts is not None and facts.error and (before is None or before.error != facts.error):
            logger.warning("%s", facts.error)  # once per change of the class, not per resync
        return facts

    @staticmethod
    def _pod_gpus(name: str, obj: Mapping[str, Any], before: PodGpusFacts | None) -> PodGpusFacts:
        # equal facts (a heartbeat: only seen_at moved) are no change to the reflector: no poke
        return pod_gpus_facts(name, obj, before, datetime.now(UTC))

    async def __aenter__(self) -> ClusterWatches:
        """Start the watches and return once each has listed its kind once."""
        reflectors: list[Reflector[Any]] = [self.nodes, self.topologies, self.pod_gpus, self.priority_classes]
        reflectors.append(self.quotas)
        reflectors += [r for r in (self.slices, self.claims, self.claim_templates) if r is not None]
        self._tasks = [asyncio.create_task(r.run(), name=f"watch {r.kind}") for r in reflectors]
        await asyncio.gather(*(r.synced.wait() for r in reflectors))
        logger.info("watching %d nodes and %d NodeTopologies", len(self.nodes.items), len(self.topologies.items))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
