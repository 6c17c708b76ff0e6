"""The only module that talks to the API server: a small asyncio client on aiohttp (kopf's own transport).

Credentials come from the kubernetes package's loaders (in-cluster service account with token rotation,
kubeconfig with client certificates, tokens or exec plugins), read per request so rotated tokens are
used; its generated API classes are never imported (they would cost the operator ~22 MB and seconds at
start). Errors are translated into ``gputopo.kube.errors``; create-if-absent and delete-if-present
are idempotent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol
from urllib.parse import quote

import aiohttp
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gputopo.api.group import FIELD_MANAGER_OPERATOR, GROUP, VERSION
from gputopo.api.nodetopology import NodeTopology
from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.kube.errors import AlreadyExistsError, ApiError, ConflictError, KubeconfigError, NotFoundError

__all__ = [
    "GANG_PLACEMENT_GROUP",
    "GANG_PLACEMENT_PLURAL",
    "GANG_PLACEMENT_VERSION",
    "DeletionOutcome",
    "EvictionOutcome",
    "InvolvedObject",
    "KubeClient",
    "gang_placement_path",
    "load_configuration",
    "status_patch",
]

JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# The GangPlacement records of gangs gputopo places without owning them (namespaced, with a status subresource).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
GANG_PLACEMENT_GROUP = "gputopo.io"
GANG_PLACEMENT_VERSION = "v1alpha1"
GANG_PLACEMENT_PLURAL = "gangplacements"

# How kube-apiserver words a JSON patch that does not apply (a test op failed, or a path it names is gone).
_NOT_APPLIED = "the server rejected our request due to an error in our request"

# What became of an eviction: done (or under way), the pod already gone, or refused by a PodDisruptionBudget.
EvictionOutcome = Literal["evicted", "gone", "blocked"]
# What became of a deletion with preconditions: done, nothing there, or the object there is not the one meant.
DeletionOutcome = Literal["deleted", "gone", "changed"]
# The status's optional fields: a merge patch removes each one the new status does not have.
_CLEARABLE = tuple(f.alias or n for n, f in TrainingJobStatus.model_fields.items() if f.default is None)


class InvolvedObject(Protocol):
    """What an Event is about: any object, named by its apiVersion, kind, name and uid (its namespace is the
    Event's)."""

    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


class _TrainingJob:
    __slots__ = ("api_version", "kind", "name", "uid")

    def __init__(self, name: str, uid: str) -> None:
        self.api_version, self.kind, self.name, self.uid = f"{GROUP}/{VERSION}", "TrainingJob", name, uid


def load_configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """In-cluster credentials in a pod, else the kubeconfig (``$KUBECONFIG`` or ~/.kube/config).

    Raises KubeconfigError when neither loads.
    """
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        try:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        except (k8s_config.ConfigException, OSError) as exc:
            raise KubeconfigError(f"not in a pod, and no kubeconfig loads: {exc}") from exc
    return configuration


def status_patch(status: TrainingJobStatus) -> dict[str, Any]:
    """A merge patch that makes the stored status equal ``status`` (absent fields are removed)."""
    body = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key in _CLEARABLE:
        body.setdefault(key, None)
    return {"status": body}


def _ssl_context(configuration: k8s.Configuration) -> ssl.SSLContext | bool:
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def _authorization(configuration: k8s.Configuration) -> str | None:
    """The Authorization header, asked of the configuration each time (its hook re-reads rotated tokens)."""
    token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    if token:
        return str(token) if " " in str(token) else f"Bearer {token}"
    if configuration.username:
        pair = f"{configuration.username}:{configuration.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    return None


def _error(status: int, text: str, what: str) -> ApiError:
    """An API error from the server's Status object (or whatever text came back)."""
    reason, message = "", text.strip()[:300]
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            reason, message = str(body.get("reason") or ""), str(body.get("message") or message)
    except ValueError:
        pass
    full = f"{what}: {status} {reason or 'error'}: {message}" if message else f"{what}: {status} {reason}"
    if status == 404:
        return NotFoundError(full, status, reason or "NotFound")
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(full, status, reason)
        return ConflictError(full, status, reason or "Conflict")
    return ApiError(full, status, reason)


def _transport_error(what: str, exc: BaseException) -> ApiError:
    """No answer at all (refused, reset, timed out): status 0."""
    return ApiError(f"{what}: {type(exc).__name__}: {exc}", 0, type(exc).__name__)


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(part, safe="") for part in parts)


def gang_placement_path(namespace: str, name: str | None = None, *sub: str) -> str:
    """The path of a GangPlacement (or, without ``name``, of a namespace's GangPlacements)."""
    where = ("namespaces", namespace, GANG_PLACEMENT_PLURAL, *((name, *sub) if name else ()))
    return "/apis" + _path(GANG_PLACEMENT_GROUP, GANG_PLACEMENT_VERSION, *where)


def _not_applicable(exc: ApiError) -> bool:
    """Whether a refused JSON patch does not apply to the object as it is now: one of its ``test`` ops failed, or a
    path it names is gone. kube-apiserver (v1.36) answers both with 422 Invalid and only the generic words below,
    nothing in the details; a validation refusal is 422 Invalid too, but says what is invalid instead."""
    return exc.status == 422 and str(exc).endswith(f": {_NOT_APPLIED}")


def _budget_refused(exc: ApiError) -> bool:
    """Whether a refused eviction was refused by a PodDisruptionBudget (429, "... would violate the pod's
    disruption budget"), not by the API server's own throttling (also 429)."""
    return exc.status == 429 and "disruption budget" in str(exc).lower()


def _job_path(namespace: str, name: str, *sub: str) -> str:
    return "/apis" + _path(GROUP, VERSION, "namespaces", namespace, "trainingjobs", name, *sub)


def _core_path(namespace: str, plural: str, name: str | None = None) -> str:
    return "/api/v1" + _path("namespaces", namespace, plural, *((name,) if name else ()))


def workload_path(namespace: str | None, name: str | None = None, *sub: str) -> str:
    """A path of Kueue's Workloads (``kueue.x-k8s.io/v1beta2``; without ``namespace``, every namespace's)."""
    where = ("namespaces", namespace) if namespace else ()
    return "/apis" + _path(KUEUE_GROUP, KUEUE_VERSION, *where, "workloads", *((name, *sub) if name else ()))


def resource_path(namespace: str | None, plural: str, name: str | None = None) -> str:
    """A path of resource.k8s.io/v1 (ResourceClaims are namespaced, ResourceSlices are not)."""
    where = ("namespaces", namespace) if namespace else ()
    return "/apis" + _path("resource.k8s.io", "v1", *where, plural, *((name,) if name else ()))


class KubeClient:
    """One aiohttp session (made in the running loop on first use), at most ``concurrency`` requests at once.

    Watches are not requests: each holds a connection of its own for its whole life and is not counted, so no
    number of open watches can leave a request without a connection (the connection pool has no limit; the
    requests' semaphore is the limit)."""

    def __init__(
        self, configuration: k8s.Configuration, concurrency: int = 32, *, timeout_seconds: float = 30.0
    ) -> None:
        self._configuration = configuration
        self._server = str(configuration.host).rstrip("/")
        self._ssl = _ssl_context(configuration)
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        self._limit = asyncio.Semaphore(concurrency)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": JSON}
        authorization = _authorization(self._configuration)
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | list[dict[str, Any]] | None = None,
        content_type: str = JSON,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = self._headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":"))
        async with self._limit:
            try:
                async with self._session_now().request(
                    method, self._server + path, params=params, data=data, headers=headers
                ) as response:
                    text = await response.text()
                    if response.status >= 400:
                        raise _error(response.status, text, what)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise _transport_error(what, exc) from exc
        try:
            result = json.loads(text) if text else {}
        except ValueError as exc:
            raise ApiError(f"{what}: the API server answered with something not JSON", response.status) from exc
        return result if isinstance(result, dict) else {}

    async def get(self, what: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """A GET, e.g. one page of a list (``limit`` and ``continue`` in ``params``)."""
        return await self._request(what, "GET", path, params=params)

    async def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``group/version`` now (its discovery document lists it):
        False for a CRD not installed, or an API not enabled in this Kubernetes. Other errors raise."""
        path = "/api/v1" if not group else "/apis" + _path(group, version)
        try:
            document = await self.get(f"discover {group or 'core'}/{version}", path)
        except NotFoundError:
            return False
        resources = document.get("resources")
        return any(isinstance(r, dict) and r.get("name") == plural for r in resources or ())

    async def get_node_topology(self, name: str) -> dict[str, Any]:
        """The NodeTopology named after a node; NotFoundError when there is none."""
        path = "/apis" + _path(GROUP, VERSION, NodeTopology.plural, name)
        return await self.get(f"get NodeTopology {name}", path)

    async def watch(self, what: str, path: str, params: dict[str, str], *, read_timeout: float) -> AsyncIterator[Any]:
        """The events of a watch, one parsed JSON line at a time (a line is dropped as soon as it is read).

        Ends when the server closes the stream; raises ``ApiError`` when it refuses or the connection breaks.
        """
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout)
        try:
            async with self._session_now().get(
                self._server + path, params={**params, "watch": "true"}, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status >= 400:
                    raise _error(response.status, await response.text(), what)
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            try:
                                yield json.loads(line)
                            except ValueError as exc:
                                raise ApiError(f"{what}: a watch event is not JSON", response.status) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _transport_error(what, exc) from exc

    async def _request_unless(self, tolerated: type[ApiError], what: str, method: str, path: str, **kw: Any) -> bool:
        """``_request``, where ``tolerated`` (already exists, not found) is an outcome: False when it was raised."""
        try:
            await self._request(what, method, path, **kw)
        except tolerated:
            return False
        return True

    # -- TrainingJobs ---------------------------------------------------------------------------------------

    async def write_status(self, namespace: str, name: str, status: TrainingJobStatus) -> str:
        """Write the whole status; returns the new resourceVersion."""
        what = f"status of TrainingJob {namespace}/{name}"
        return await self._merge_patch(what, _job_path(namespace, name, "status"), status_patch(status))

    async def _merge_patch(self, what: str, path: str, body: dict[str, Any]) -> str:
        """A merge patch (a status, usually); returns the object's new resourceVersion."""
        result = await self._request(
            what, "PATCH", path, body=body, content_type=MERGE, params={"fieldManager": FIELD_MANAGER_OPERATOR}
        )
        return str((result.get("metadata") or {}).get("resourceVersion", ""))

    async def delete_job(self, namespace: str, name: str) -> None:
        await self._request_unless(
            NotFoundError,
            f"delete TrainingJob {namespace}/{name}",
            "DELETE",
            _job_path(namespace, name),
            body={"propagationPolicy": "Background"},
        )

    # -- pods and services ------------------------------------------------------------------------------------

    async def _create(self, plural: str, kind: str, body: dict[str, Any], path: str | None = None) -> bool:
        meta = body["metadata"]
        return await self._request_unless(
            AlreadyExistsError,
            f"create {kind} {meta['namespace']}/{meta['name']}",
            "POST",
            path or _core_path(meta["namespace"], plural),
            body=body,
            params={"fieldManager": FIELD_MANAGER_OPERATOR},
        )

    async def create_pod(self, body: dict[str, Any]) -> bool:
        """Create unless it exists; True when this call created it."""
        return await self._create("pods", "Pod", body)

    async def dry_run_pod(self, body: dict[str, Any]) -> str:
        """A server-side dry run (``dryRun=All``) of creating the pod: "" when the API server would admit it, else
        its refusal (quota, Pod Security, LimitRange, validation). Raises ``ApiError`` when it gave no answer
        (retryable)."""
        meta = body["metadata"]
        what = f"dry run of creating Pod {meta['namespace']}/{meta['name']}"
        params = {"dryRun": "All", "fieldManager": FIELD_MANAGER_OPERATOR}
        try:
            await self._request(what, "POST", _core_path(meta["namespace"], "pods"), body=body, params=params)
        except AlreadyExistsError:
            return ""  # admitted: only the name is taken
        except ApiError as error:
            if error.retryable:
                raise
            return str(error)
        return ""

    async def create_service(self, body: dict[str, Any]) -> bool:
        return await self._create("services", "Service", body)

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> None:
        await self._request_unless(
            NotFoundError,
            f"delete Pod {namespace}/{name}",
            "DELETE",
            _core_path(namespace, "pods", name),
            body={"gracePeriodSeconds": grace_seconds, "propagationPolicy": "Background"},
        )

    async def patch_pod_json(self, namespace: str, name: str, ops: Sequence[dict[str, Any]]) -> bool:
        """Apply a JSON patch (RFC 6902) to a pod; True when applied. False when the pod is gone, or the patch does
        not apply to it as it is now (one of its ``test`` ops failed, or a path it names is gone: the pod changed
        meanwhile), or a conflict; nothing was applied then. Other refusals (a change validation forbids) raise."""
        return await self._json_patch(f"patch Pod {namespace}/{name}", _core_path(namespace, "pods", name), ops)

    async def _json_patch(self, what: str, path: str, ops: Sequence[dict[str, Any]]) -> bool:
        """A JSON patch (RFC 6902): True when applied; False when the object is gone, conflicts, or the patch does not
        apply to it as it is now (``_not_applicable``); other refusals raise."""
        try:
            await self._request(
                what,
                "PATCH",
                path,
                body=list(ops),
                content_type=JSON_PATCH,
                params={"fieldManager": FIELD_MANAGER_OPERATOR},
            )
        except (NotFoundError, ConflictError):
            return False
        except ApiError as exc:
            if _not_applicable(exc):
                return False
            raise
        return True

    async def evict_pod(
        self, namespace: str, name: str, grace_seconds: int | None, *, uid: str | None = None
    ) -> EvictionOutcome:
        """Evict a pod through the Eviction API, so its PodDisruptionBudgets are honoured. "blocked": a budget
        allows no disruption now (try again later); "gone": no such pod, or (with ``uid``) not the pod meant."""
        options: dict[str, Any] = {}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            **({"deleteOptions": options} if options else {}),
        }
        path = _core_path(namespace, "pods", name) + "/eviction"
        try:
            await self._request(f"evict Pod {namespace}/{name}", "POST", path, body=body)
        except (NotFoundError, ConflictError):
            return "gone"
        except ApiError as exc:
            if _budget_refused(exc):
                return "blocked"
            raise
        return "evicted"

    # -- GangPlacements ---------------------------------------------------------------------------------------

    async def create_gang_placement(self, body: dict[str, Any]) -> bool:
        """Create a gang's GangPlacement unless it exists; True when this call created it."""
        meta = body["metadata"]
        api_version = f"{GANG_PLACEMENT_GROUP}/{GANG_PLACEMENT_VERSION}"
        full = {"apiVersion": api_version, "kind": "GangPlacement", **body}
        return await self._create(GANG_PLACEMENT_PLURAL, "GangPlacement", full, gang_placement_path(meta["namespace"]))

    async def write_gang_placement_status(self, namespace: str, name: str, status: dict[str, Any]) -> str:
        """Write a GangPlacement's status (a merge patch of the status subresource: a field None in ``status`` is
        removed, a list replaced); returns the new resourceVersion. NotFoundError when there is no such record."""
        what = f"status of GangPlacement {namespace}/{name}"
        return await self._merge_patch(what, gang_placement_path(namespace, name, "status"), {"status": status})

    async def delete_gang_placement(
        self, namespace: str, name: str, *, uid: str | None = None, resource_version: str | None = None
    ) -> DeletionOutcome:
        """Delete a GangPlacement; with ``uid`` (and ``resource_version``) only that very object as read, by the API
        server's preconditions. "gone": there is no such record; "changed": the record there is another (made
        again under the name) or was written since it was read, and is kept."""
        preconditions = {
            **({"uid": uid} if uid else {}),
            **({"resourceVersion": resource_version} if resource_version else {}),
        }
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if preconditions:
            body["preconditions"] = preconditions
        what = f"delete GangPlacement {namespace}/{name}"
        try:
            await self._request(what, "DELETE", gang_placement_path(namespace, name), body=body)
        except NotFoundError:
            return "gone"
        except ConflictError:
            return "changed"
        return "deleted"

    # -- ResourceClaims ---------------------------------------------------------------------------------------

    async def create_claim(self, body: dict[str, Any]) -> bool:
        """Create unless it exists; True when this call created it."""
        namespace = body["metadata"]["namespace"]
        return await self._create("resourceclaims", "ResourceClaim", body, resource_path(namespace, "resourceclaims"))

    async def patch_claim_json(
        self, namespace: str, name: str, ops: Sequence[dict[str, Any]], *, status: bool = False
    ) -> bool:
        """Apply a JSON patch (RFC 6902) to a ResourceClaim, or with ``status`` to its status subresource (writing
        ``status.allocation`` also needs ``resourceclaims/binding``); True when applied. False when the claim is
        gone or one of the patch's ``test`` ops failed (the claim changed meanwhile); other refusals raise."""
        path = resource_path(namespace, "resourceclaims", name) + ("/status" if status else "")
        return await self._json_patch(f"patch ResourceClaim {namespace}/{name}{' status' if status else ''}", path, ops)

    async def delete_claim(self, namespace: str, name: str) -> None:
        await self._request_unless(
            NotFoundError,
            f"delete ResourceClaim {namespace}/{name}",
            "DELETE",
            resource_path(namespace, "resourceclaims", name),
            body={"propagationPolicy": "Background"},
        )

    # -- Kueue Workloads (of TrainingJobs in a Kueue queue) ----------------------------------------------------

    async def create_workload(self, body: dict[str, Any]) -> bool:
        """Create a Kueue Workload unless one of its name exists; True when this call created it."""
        namespace = body["metadata"]["namespace"]
        return await self._create("workloads", "Workload", body, workload_path(namespace))

    async def delete_workload(self, namespace: str, name: str) -> None:
        await self._request_unless(
            NotFoundError,
            f"delete Workload {namespace}/{name}",
            "DELETE",
            workload_path(namespace, name),
            body={"propagationPolicy": "Background"},
        )

    async def patch_workload_status(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        """A merge patch of a Workload's status; True when applied. False when the Workload is gone, or changed
        since the resourceVersion the patch carries (409): the next read decides again. Other refusals raise."""
        try:
            await self._merge_patch(
                f"status of Workload {namespace}/{name}", workload_path(namespace, name, "status"), body
            )
        except (NotFoundError, ConflictError):
            return False
        return True

    # -- events -----------------------------------------------------------------------------------------------

    async def event(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        """An Event on the TrainingJob ``namespace/name``."""
        await self.event_on(namespace, _TrainingJob(name, uid), type_, reason, message)

    async def event_on(self, namespace: str, involved: InvolvedObject, type_: str, reason: str, message: str) -> None:
        """An Event on any object of ``namespace``: a gang's owner (a Job, a JobSet, ...) or a pod."""
        now = datetime.now(UTC)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.api_version,
                "kind": involved.kind,
                "name": involved.name,
                "namespace": namespace,
                "uid": involved.uid,
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
        what = f"event on {involved.kind} {namespace}/{involved.name}"
        await self._request(what, "POST", _core_path(namespace, "events"), body=body)

    # -- the operator's own objects ---------------------------------------------------------------------------

    async def ensure_config_map(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
        await self._request_unless(
            AlreadyExistsError,
            f"create ConfigMap {namespace}/{name}",
            "POST",
            _core_path(namespace, "configmaps"),
            body=body,
        )

    async def drop_finalizer(self, namespace: str, name: str, finalizer: str, attempts: int = 3) -> None:
        """Take the operator's finalizer off its ConfigMap, so a stopped operator blocks no deletion."""
        path = _core_path(namespace, "configmaps", name)
        for _ in range(attempts):
            try:
                body = await self._request(f"read ConfigMap {namespace}/{name}", "GET", path)
            except NotFoundError:
                return
            meta = body.get("metadata") or {}
            finalizers = list(meta.get("finalizers") or [])
            if finalizer not in finalizers:
                return
            patch = {
                "metadata": {
                    "finalizers": [f for f in finalizers if f != finalizer],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            }
            try:
                await self._request(
                    f"release ConfigMap {namespace}/{name}", "PATCH", path, body=patch, content_type=MERGE
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
            await self._request_unless(
                AlreadyExistsError,
                f"create ClusterKopfPeering {name}",
                "POST",
                "/apis/kopf.dev/v1/clusterkopfpeerings",
                body={**body, "kind": "ClusterKopfPeering"},
            )
            return
        for namespace in namespaces:
            await self._request_unless(
                AlreadyExistsError,
                f"create KopfPeering {namespace}/{name}",
                "POST",
                "/apis/kopf.dev/v1" + _path("namespaces", namespace, "kopfpeerings"),
                body={**body, "kind": "KopfPeering"},
            )
