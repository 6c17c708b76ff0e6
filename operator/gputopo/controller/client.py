"""The only module that talks to the API server: a thin async face over the kubernetes client.

Calls run in worker threads (the kubernetes client blocks). ``ApiException`` and transport errors are
translated into ``gputopo.controller.errors``; create-if-absent and delete-if-present are idempotent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gputopo.api.group import FIELD_MANAGER_OPERATOR, GANG_GATE, GROUP, VERSION
from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.controller.errors import AlreadyExistsError, ApiError, ConflictError, NotFoundError

__all__ = ["KubeClient", "load_api_client", "status_patch"]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_CLEARABLE = ("placement", "startTime", "completionTime", "lastRestartTime")


def load_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials in a pod, else the kubeconfig (``$KUBECONFIG`` or ~/.kube/config)."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = 64
    return k8s.ApiClient(configuration)


def status_patch(status: TrainingJobStatus) -> dict[str, Any]:
    """A merge patch that makes the stored status equal ``status`` (absent fields are removed)."""
    body = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key in _CLEARABLE:
        body.setdefault(key, None)
    return {"status": body}


def _translate(exc: Exception, what: str) -> ApiError:
    if isinstance(exc, ApiException):
        status, reason = int(exc.status or 0), str(exc.reason or "")
        message = f"{what}: {status} {reason}"
        if status == 404:
            return NotFoundError(message, status, reason)
        if status == 409:
            body = str(exc.body or "")
            if "AlreadyExists" in body:
                return AlreadyExistsError(message, status, "AlreadyExists")
            return ConflictError(message, status, reason)
        return ApiError(message, status, reason)
    return ApiError(f"{what}: {exc}", 0, type(exc).__name__)


class KubeClient:
    def __init__(self, api: k8s.ApiClient, concurrency: int = 32) -> None:
        self._core = k8s.CoreV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)
        self._limit = asyncio.Semaphore(concurrency)

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async with self._limit:
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except (ApiException, HTTPError, OSError) as exc:
                raise _translate(exc, what) from exc

    async def _call_unless(
        self, tolerated: type[ApiError], what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> bool:
        """``_call``, where ``tolerated`` (already exists, not found) is an outcome: False when it was raised."""
        try:
            await self._call(what, fn, *args, **kwargs)
        except tolerated:
            return False
        return True

    # -- TrainingJobs ---------------------------------------------------------------------------------------

    async def write_status(self, namespace: str, name: str, status: TrainingJobStatus) -> str:
        """Write the whole status; returns the new resourceVersion."""
        result: dict[str, Any] = await self._call(
            f"status of TrainingJob {namespace}/{name}",
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            "trainingjobs",
            name,
            status_patch(status),
            field_manager=FIELD_MANAGER_OPERATOR,
            _content_type=MERGE,
        )
        return str((result.get("metadata") or {}).get("resourceVersion", ""))

    async def delete_job(self, namespace: str, name: str) -> None:
        await self._call_unless(
            NotFoundError,
            f"delete TrainingJob {namespace}/{name}",
            self._custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            "trainingjobs",
            name,
            propagation_policy="Background",
        )

    # -- pods and services ------------------------------------------------------------------------------------

    async def create_pod(self, body: dict[str, Any]) -> bool:
        """Create unless it exists; True when this call created it."""
        meta = body["metadata"]
        return await self._call_unless(
            AlreadyExistsError,
            f"create Pod {meta['namespace']}/{meta['name']}",
            self._core.create_namespaced_pod,
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER_OPERATOR,
        )

    async def create_service(self, body: dict[str, Any]) -> bool:
        meta = body["metadata"]
        return await self._call_unless(
            AlreadyExistsError,
            f"create Service {meta['namespace']}/{meta['name']}",
            self._core.create_namespaced_service,
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER_OPERATOR,
        )

    async def ungate(self, namespace: str, name: str) -> None:
        """Remove gputopo's scheduling gate only (other controllers' gates stay)."""
        patch = {"spec": {"schedulingGates": [{"name": GANG_GATE, "$patch": "delete"}]}}
        await self._call_unless(
            NotFoundError,
            f"ungate Pod {namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            patch,
            field_manager=FIELD_MANAGER_OPERATOR,
            _content_type=STRATEGIC,
        )

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> None:
        await self._call_unless(
            NotFoundError,
            f"delete Pod {namespace}/{name}",
            self._core.delete_namespaced_pod,
            name,
            namespace,
            grace_period_seconds=grace_seconds,
            propagation_policy="Background",
        )

    # -- events -----------------------------------------------------------------------------------------------

    async def event(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        now = datetime.now(UTC)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TrainingJob",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER_OPERATOR},
            "reportingComponent": FIELD_MANAGER_OPERATOR,
            "reportingInstance": FIELD_MANAGER_OPERATOR,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        await self._call(f"event on {namespace}/{name}", self._core.create_namespaced_event, namespace, body)

    # -- the operator's own objects ---------------------------------------------------------------------------

    async def ensure_config_map(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
        await self._call_unless(
            AlreadyExistsError,
            f"create ConfigMap {namespace}/{name}",
            self._core.create_namespaced_config_map,
            namespace,
            body,
        )

    async def drop_finalizer(self, namespace: str, name: str, finalizer: str, attempts: int = 3) -> None:
        """Take the operator's finalizer off its ConfigMap, so a stopped operator blocks no deletion."""
        for _ in range(attempts):
            try:
                body = await self._call(
                    f"read ConfigMap {namespace}/{name}", self._core.read_namespaced_config_map, name, namespace
                )
            except NotFoundError:
                return
            finalizers = list(body.metadata.finalizers or [])
            if finalizer not in finalizers:
                return
            patch = {
                "metadata": {
                    "finalizers": [f for f in finalizers if f != finalizer],
                    "resourceVersion": body.metadata.resource_version,
                }
            }
            try:
                await self._call(
                    f"release ConfigMap {namespace}/{name}",
                    self._core.patch_namespaced_config_map,
                    name,
                    namespace,
                    patch,
                    _content_type=MERGE,
                )
                return
            except NotFoundError:
                return
            except ConflictError:
                continue  # kopf changed it meanwhile: read again

    async def ensure_peering(self, name: str, namespaces: list[str]) -> None:
        """Create the (Cluster)KopfPeering kopf will use, if absent (kopf.dev/v1, see crds/)."""
        body: dict[str, Any] = {"apiVersion": "kopf.dev/v1", "metadata": {"name": name}}
        if not namespaces:
            await self._call_unless(
                AlreadyExistsError,
                f"create ClusterKopfPeering {name}",
                self._custom.create_cluster_custom_object,
                "kopf.dev",
                "v1",
                "clusterkopfpeerings",
                {**body, "kind": "ClusterKopfPeering"},
            )
            return
        for namespace in namespaces:
            await self._call_unless(
                AlreadyExistsError,
                f"create KopfPeering {namespace}/{name}",
                self._custom.create_namespaced_custom_object,
                "kopf.dev",
                "v1",
                namespace,
                "kopfpeerings",
                {**body, "kind": "KopfPeering"},
            )
