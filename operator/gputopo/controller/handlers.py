"""The kopf side, kept thin: indexes of the watched objects, startup, and the control-loop daemon.

Indexes parse bodies into frozen facts and poke the loop; the daemon on the operator's ConfigMap runs
it. kopf peering stops daemons on a replica that is not the leader, so one loop acts at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from gputopo.api.group import GPU_RESOURCE, GROUP, LABEL_JOB, VERSION
from gputopo.controller.facts import (
    JobFacts,
    JobKey,
    NodeFacts,
    PodFacts,
    TopologyFacts,
    job_facts,
    node_facts,
    pod_facts,
)
from gputopo.controller.runtime import Runtime, World
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.topologies import carry_pod_since, topology_facts
from gputopo.controller.view import ClusterView

__all__ = ["RUNTIME", "register", "runtime_of"]

RUNTIME = "runtime"  # the memo key of the Runtime
_TOPOLOGY_CACHE = "topology_cache"
FINALIZER = f"{GROUP}/operator"  # kopf puts it on the ConfigMap whose daemon runs the control loop

logger = logging.getLogger("gputopo.controller")


def runtime_of(memo: Any) -> Runtime:
    runtime = memo.get(RUNTIME) if hasattr(memo, "get") else None
    if not isinstance(runtime, Runtime):
        raise kopf.TemporaryError("the operator has not started yet", delay=1)
    return runtime


def _poke(memo: Any) -> None:
    runtime = memo.get(RUNTIME) if hasattr(memo, "get") else None
    if isinstance(runtime, Runtime):
        runtime.poke()


def _single(store: Iterable[Any]) -> Any:
    for value in store:
        return value
    return None


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings, make_runtime: Callable[[], Runtime]) -> None:
    """Register every handler on ``registry``; ``make_runtime`` builds the shared state at startup."""

    @kopf.on.login(registry=registry, id="login")
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A registry of our own gets none of kopf's default handlers: log in as the kubernetes client does.
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    @kopf.on.startup(registry=registry, id="startup")
    async def startup(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
        runtime = make_runtime()
        memo[RUNTIME] = runtime
        memo[_TOPOLOGY_CACHE] = {}
        ops = runtime.settings
        settings.persistence.finalizer = FINALIZER
        settings.posting.level = logging.WARNING  # decisions are Events of our own
        settings.watching.server_timeout = 300
        if not ops.standalone:
            settings.peering.name = ops.peering_name
            settings.peering.mandatory = True
            settings.peering.clusterwide = ops.clusterwide
            settings.peering.lifetime = ops.peering_lifetime_seconds
            if ops.priority is not None:
                settings.peering.priority = ops.priority
        await runtime.client.ensure_config_map(ops.operator_namespace, ops.config_map)
        runtime.metrics.serve(ops.metrics_port)

    @kopf.on.cleanup(registry=registry, id="cleanup")
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime = memo.get(RUNTIME)
        if isinstance(runtime, Runtime):
            ops = runtime.settings
            await runtime.client.drop_finalizer(ops.operator_namespace, ops.config_map, FINALIZER)

    # -- indexes ------------------------------------------------------------------------------------------

    @kopf.index(GROUP, VERSION, "trainingjobs", registry=registry, id="training_jobs")
    def training_jobs(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[JobKey, JobFacts]:
        facts = job_facts(body)
        _poke(memo)
        return {facts.key: facts}

    @kopf.index("v1", "pods", registry=registry, id="job_pods")
    def job_pods(body: kopf.Body, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> dict[JobKey, PodFacts]:
        if LABEL_JOB not in labels:
            return {}
        facts = pod_facts(body)
        _poke(memo)
        return {(facts.namespace, str(facts.job)): facts}

    @kopf.index("v1", "pods", registry=registry, id="gpu_pods")
    def gpu_pods(body: kopf.Body, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> dict[str, PodFacts]:
        if not spec.get("nodeName") or not _requests_gpus(spec):
            return {}
        facts = pod_facts(body)
        if facts.job is None:
            _poke(memo)  # a pod that is not ours took GPUs
        return {facts.node: facts}

    @kopf.index("v1", "nodes", registry=registry, id="nodes")
    def nodes(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, NodeFacts]:
        facts = node_facts(body)
        cache: dict[str, NodeFacts] = memo.setdefault("node_cache", {})
        if cache.get(facts.name) != facts:
            cache[facts.name] = facts
            _poke(memo)  # heartbeats change nothing we read; a real change wakes the loop
        return {facts.name: facts}

    @kopf.index(GROUP, VERSION, "nodetopologies", registry=registry, id="topologies")
    def topologies(body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> dict[str, TopologyFacts]:
        return {name: _topology(memo, name, body)}

    # Deletions leave the indexes by themselves; these wake the loop for them. Event handlers keep no
    # state on the objects (change handlers would annotate every Node and NodeTopology).
    @kopf.on.event("v1", "nodes", registry=registry, id="node_events")
    def node_event(memo: kopf.Memo, name: str, type: str | None, **_: Any) -> None:
        if type == "DELETED":
            memo.setdefault("node_cache", {}).pop(name, None)
            _poke(memo)

    @kopf.on.event(GROUP, VERSION, "nodetopologies", registry=registry, id="topology_events")
    def topology_event(memo: kopf.Memo, name: str, type: str | None, **_: Any) -> None:
        if type == "DELETED":
            memo.setdefault(_TOPOLOGY_CACHE, {}).pop(name, None)
            _poke(memo)

    # -- the control loop -----------------------------------------------------------------------------------

    # The indexes arrive as keyword arguments named after them, which kopf's DaemonFn protocol cannot say.
    @kopf.daemon(  # type: ignore[arg-type]
        "v1",
        "configmaps",
        registry=registry,
        id="control_loop",
        field="metadata.name",
        value=settings.config_map,
        when=lambda namespace, **_: namespace == settings.operator_namespace,
        cancellation_timeout=5.0,
    )
    async def control_loop(
        stopped: kopf.DaemonStopped,
        memo: kopf.Memo,
        training_jobs: kopf.Index[JobKey, JobFacts],
        job_pods: kopf.Index[JobKey, PodFacts],
        gpu_pods: kopf.Index[str, PodFacts],
        nodes: kopf.Index[str, NodeFacts],
        topologies: kopf.Index[str, TopologyFacts],
        **_: Any,
    ) -> None:
        runtime = runtime_of(memo)
        logger.info("control loop started (this replica leads)")

        def read() -> World:
            return World(
                jobs={key: _single(store) for key, store in training_jobs.items()},
                job_pods={key: tuple(store) for key, store in job_pods.items()},
                view=ClusterView(
                    topologies={key: _single(store) for key, store in topologies.items()},
                    nodes={key: _single(store) for key, store in nodes.items()},
                    pods=tuple(pod for store in gpu_pods.values() for pod in store),
                ),
            )

        runtime.poke()
        await runtime.run(read, lambda: bool(stopped))
        logger.info("control loop stopped: %s", stopped.reason)


def _requests_gpus(spec: Mapping[str, Any]) -> bool:
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        if GPU_RESOURCE in (resources.get("limits") or {}) or GPU_RESOURCE in (resources.get("requests") or {}):
            return True
    return False


def _topology(memo: Any, name: str, body: kopf.Body) -> TopologyFacts:
    """Parse only what changed: the probe re-publishes ``observedAt`` every interval."""
    status = dict(body.get("status") or {})
    raw = {k: v for k, v in status.items() if k not in ("observedAt", "conditions")}
    cache: dict[str, tuple[dict[str, Any], TopologyFacts]] = memo.setdefault(_TOPOLOGY_CACHE, {})
    hit = cache.get(name)
    if hit is not None and hit[0] == raw:
        return hit[1]  # same content: keep the facts (and the time the content last changed)
    facts = topology_facts({"metadata": {"name": name}, "status": status})
    facts = carry_pod_since(hit[1] if hit else None, facts, datetime.now(UTC))
    cache[name] = (raw, facts)
    runtime = memo.get(RUNTIME) if hasattr(memo, "get") else None
    if isinstance(runtime, Runtime):
        if facts.topology is not None:
            runtime.quarantine.observe(name, facts.topology, datetime.now(UTC))
        runtime.poke()
    if facts.error:
        logger.warning("NodeTopology %s: %s", name, facts.error)
    return facts
