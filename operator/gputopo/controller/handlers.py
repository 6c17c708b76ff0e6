"""The kopf side, kept thin: indexes of TrainingJobs and pods, startup, and the control-loop daemon.

Indexes parse bodies into frozen facts and poke the loop; the daemon on the operator's ConfigMap runs
it. kopf peering stops daemons on a replica that is not the leader, so one loop acts at a time. Nodes,
NodeTopologies and NodePodGpus are not kopf's: the loop's own lean watches (``watches.py``) read them, because
kopf queues every object's whole body for a worker of its own (~130 MB and ~40 s at 1,000 nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import kopf

from gputopo.api.gpus import names_gpus
from gputopo.api.group import GROUP, LABEL_JOB, VERSION
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import (
    JobFacts,
    JobKey,
    PodFacts,
    job_facts,
    pod_facts,
)
from gputopo.control.view import ClusterView
from gputopo.controller.gangwatches import GangWatches
from gputopo.controller.kueuewatch import KueueWatch
from gputopo.controller.runtime import Runtime, World
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.startup import STARTUP_RETRIES, STARTUP_RETRY_SECONDS, StartupError
from gputopo.controller.watches import ClusterWatches
from gputopo.kube.errors import ApiError, KubeconfigError

__all__ = ["RUNTIME", "NoDiffBase", "register", "runtime_of"]

RUNTIME = "runtime"  # the memo key of the Runtime
FINALIZER = f"{GROUP}/operator"  # kopf puts it on the ConfigMap whose daemon runs the control loop

logger = logging.getLogger("gputopo.controller")


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's record of an object's last handled state, for change handlers (``on.update`` and the like) only.

    The operator registers none: its indexes read each body whole, and its one daemon needs no diff. Building
    the record deep-copies every event's body (a tenth of the operator's CPU while a queue of jobs starts), so
    none is built, fetched or stored. ``register`` refuses a change handler while this is in place."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _runtime(memo: Any) -> Runtime | None:
    runtime = memo.get(RUNTIME) if hasattr(memo, "get") else None
    return runtime if isinstance(runtime, Runtime) else None


def runtime_of(memo: Any) -> Runtime:
    runtime = _runtime(memo)
    if runtime is None:
        raise kopf.TemporaryError("the operator has not started yet", delay=1)
    return runtime


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

    # Every failure ends the startup (and the operator, with one line saying why) but an API server not
    # reached yet, which is tried again for a minute.
    @kopf.on.startup(registry=registry, id="startup", errors=kopf.ErrorsMode.PERMANENT, retries=STARTUP_RETRIES)
    async def startup(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
        runtime = _runtime(memo)
        if runtime is None:
            try:
                runtime = make_runtime()
            except KubeconfigError as error:
                failure = StartupError(f"cannot load the API server's credentials: {error}")
                raise kopf.PermanentError(str(failure)) from failure
            memo[RUNTIME] = runtime
        ops = runtime.settings
        settings.persistence.finalizer = FINALIZER
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.posting.level = logging.WARNING  # decisions are Events of our own
        settings.watching.server_timeout = 300
        # A worker per object (TrainingJobs, pods) holds that object's last raw body while it idles, for
        # kopf's default of 5 s; the indexes keep only small facts, so let the bodies go sooner.
        settings.queueing.idle_timeout = ops.object_idle_seconds
        settings.watching.chunk_size = ops.list_chunk_size
        if not ops.standalone:
            settings.peering.name = ops.peering_name
            settings.peering.mandatory = True
            settings.peering.clusterwide = ops.clusterwide
            settings.peering.lifetime = ops.peering_lifetime_seconds
            if ops.priority is not None:
                settings.peering.priority = ops.priority
        try:
            await runtime.client.ensure_config_map(ops.operator_namespace, ops.config_map)
        except ApiError as error:
            failure = StartupError(f"cannot start: {error}")
            if error.retryable:
                raise kopf.TemporaryError(str(failure), delay=STARTUP_RETRY_SECONDS) from failure
            raise kopf.PermanentError(str(failure)) from failure

    @kopf.on.cleanup(registry=registry, id="cleanup")
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime = memo.get(RUNTIME)
        if isinstance(runtime, Runtime):
            ops = runtime.settings
            try:
                await runtime.client.drop_finalizer(ops.operator_namespace, ops.config_map, FINALIZER)
            finally:
                await runtime.client.close()

    # -- indexes ------------------------------------------------------------------------------------------

    @kopf.index(GROUP, VERSION, "trainingjobs", registry=registry, id="training_jobs")
    async def training_jobs(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[JobKey, JobFacts]:
        facts = job_facts(body)
        if (runtime := _runtime(memo)) is not None:
            runtime.job_indexed(facts)
        return {facts.key: facts}

    @kopf.index("v1", "pods", registry=registry, id="job_pods")
    async def job_pods(body: kopf.Body, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> dict[JobKey, PodFacts]:
        if LABEL_JOB not in labels:
            return {}
        facts = pod_facts(body)
        if (runtime := _runtime(memo)) is not None:
            runtime.pod_indexed(facts)
        return {JobKey((facts.namespace, str(facts.job))): facts}

    @kopf.index("v1", "pods", registry=registry, id="gpu_pods")
    async def gpu_pods(body: kopf.Body, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> dict[str, PodFacts]:
        if not spec.get("nodeName") or not _requests_gpus(spec):
            return {}
        facts = pod_facts(body)
        if facts.holder is None and (runtime := _runtime(memo)) is not None:
            runtime.poke()  # a pod that is not ours took GPUs (a pod gputopo steered took the GPUs held for it)
        return {facts.node: facts}

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
        **_: Any,
    ) -> None:
        runtime = runtime_of(memo)
        if not runtime.settings.standalone and runtime.settings.leader_settle_seconds > 0:
            # kopf cancels this daemon if a peer of higher priority shows up meanwhile.
            await asyncio.sleep(runtime.settings.leader_settle_seconds)
        gang_watches = GangWatches(
            runtime.client,
            runtime.poke,
            poke_soon=lambda: runtime.poke(urgent=False),
            page_size=runtime.settings.list_chunk_size,
        )
        async with (
            ClusterWatches(
                runtime.client,
                runtime.poke,
                on_topology=runtime.topology_read,
                poke_soon=lambda: runtime.poke(urgent=False),
                page_size=runtime.settings.list_chunk_size,
                dra=runtime.settings.gpu_allocation is GpuAllocation.DRA,
            ) as watches,
            KueueWatch(runtime.client, runtime.poke, page_size=runtime.settings.list_chunk_size) as kueue,
            contextlib.AsyncExitStack() as stack,
        ):
            gangs = runtime.gangs
            if gangs is not None:
                await stack.enter_async_context(gang_watches)
                runtime.metrics.watch_gated(gang_watches.pods.values)
                stack.callback(runtime.metrics.watch_gated, None)
            logger.info("control loop started (this replica leads)")
            config = runtime.config

            def read() -> World:
                return World(
                    jobs={key: _single(store) for key, store in training_jobs.items()},
                    job_pods={key: tuple(store) for key, store in job_pods.items()},
                    view=ClusterView(
                        topologies=dict(watches.topologies.items),
                        nodes=dict(watches.nodes.items),
                        pods=tuple(pod for store in gpu_pods.values() for pod in store),
                        dra=watches.dra_view(),
                        pod_gpus=dict(watches.pod_gpus.items),
                        priority_classes=dict(watches.priority_classes.items),
                        kueue=kueue.view(),
                    ),
                    gangs=(
                        gangs.read(
                            gang_watches,
                            config.tiers,
                            runtime.place,
                            config.gpu_choice,
                            watches.claim_template_gpus(),
                            watches.quota_room(),
                        )
                        if gangs is not None
                        else None
                    ),
                )

            runtime.poke()
            await runtime.run(read, lambda: bool(stopped))
        logger.info("control loop stopped: %s", stopped.reason)

    _without_finalizer(registry, control_loop)
    if registry._changing.get_all_handlers():
        raise RuntimeError("a change handler needs kopf's diff base; NoDiffBase builds none")


def _without_finalizer(registry: kopf.OperatorRegistry, daemon: Callable[..., Any]) -> None:
    """Let a daemon's object be deleted without the operator.

    kopf guards an object with daemons by a finalizer. The control loop's ConfigMap is Helm's, and ``helm uninstall``
    deletes the operator's RBAC before that ConfigMap: no replica could take the finalizer off any more, and the
    ConfigMap, and its namespace, would stay Terminating for good. Without the finalizer a deleted ConfigMap only
    stops the daemon, which is all the loop needs; kopf also takes off a finalizer an earlier version left.
    kopf's decorator offers no switch for this, so the registered handler is replaced by an equal one without it.
    """
    spawning = registry._spawning
    spawning._handlers = [
        dataclasses.replace(h, requires_finalizer=False) if h.fn is daemon else h for h in spawning._handlers
    ]


def _requests_gpus(spec: Mapping[str, Any]) -> bool:
    containers = spec.get("containers")
    return isinstance(containers, list) and any(names_gpus(c) for c in containers)
