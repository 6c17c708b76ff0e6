"""The Kubernetes calls of the probe: server-side apply of NodeTopology, NodePodGpus and Node labels, Events,
pod watch."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gputopo.api.group import FIELD_MANAGER_PROBE, GROUP, VERSION
from gputopo.api.nodepodgpus import NodePodGpus
from gputopo.api.nodetopology import NodeTopology
from gputopo_probe.errors import ApiError
from gputopo_probe.publish.rest import ApiClient, load_credentials

__all__ = ["Kube", "load_api_client"]

log = logging.getLogger(__name__)
_APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body goes as JSON
_APPLY_PARAMS = {"fieldManager": FIELD_MANAGER_PROBE, "force": "true"}


def load_api_client(kubeconfig: str | Path | None = None) -> ApiClient:
    """``kubeconfig`` if given, else in-cluster, else ``$KUBECONFIG``."""
    return ApiClient(load_credentials(kubeconfig))


def _stamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Kube:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def node_uid(self, name: str) -> str:
        node = self.api.request("GET", f"/api/v1/nodes/{name}")
        return str((node or {}).get("metadata", {}).get("uid", ""))

    def node_labels(self, name: str) -> dict[str, str]:
        node = self.api.request("GET", f"/api/v1/nodes/{name}")
        labels = (node or {}).get("metadata", {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    def apply_node_topology(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        """Server-side apply of NodeTopology/<name> (owned by its Node), then of its status."""
        self._apply_node_object(NodeTopology.kind, NodeTopology.plural, name, node_uid, status)

    def apply_node_pod_gpus(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        """Server-side apply of NodePodGpus/<name> (owned by its Node), then of its status."""
        self._apply_node_object(NodePodGpus.kind, NodePodGpus.plural, name, node_uid, status)

    def _apply_node_object(self, kind: str, plural: str, name: str, node_uid: str, status: dict[str, Any]) -> None:
        """The object's status by server-side apply; the object itself first when it does not exist yet."""
        meta: dict[str, Any] = {"name": name}
        if node_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid, "blockOwnerDeletion": False}
            ]
        head = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta}
        path = f"/apis/{GROUP}/{VERSION}/{plural}/{name}"

        def apply_status() -> None:
            self.api.request(
                "PATCH", path + "/status", body={**head, "status": status}, content_type=_APPLY, params=_APPLY_PARAMS
            )

        try:
            apply_status()
        except ApiError as error:
            if error.status != 404:
                raise
            self.api.request("PATCH", path, body=head, content_type=_APPLY, params=_APPLY_PARAMS)
            apply_status()

    def apply_resource_slice(self, body: dict[str, Any]) -> None:
        """Server-side apply of a resource.k8s.io/v1 ResourceSlice (the sandbox's fake DRA driver)."""
        name = body["metadata"]["name"]
        path = f"/apis/resource.k8s.io/v1/resourceslices/{name}"
        self.api.request("PATCH", path, body=body, content_type=_APPLY, params=_APPLY_PARAMS)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A resource.k8s.io/v1 ResourceClaim (the fake DRA kubelet plugin reads what to prepare); None if absent."""
        try:
            claim = self.api.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return dict(claim) if isinstance(claim, dict) else None

    def apply_node_labels(self, name: str, labels: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        self.api.request("PATCH", f"/api/v1/nodes/{name}", body=body, content_type=_APPLY, params=_APPLY_PARAMS)

    def foreign_label(self, name: str, key: str) -> str | None:
        """The node's label ``key`` when a field manager other than the probe owns it (GPU Feature Discovery's
        ``nvidia.com/gpu.clique``, say), else None."""
        node = self.api.request("GET", f"/api/v1/nodes/{name}") or {}
        meta = node.get("metadata", {})
        value = meta.get("labels", {}).get(key)
        if value is None:
            return None
        field = f"f:{key}"
        for entry in meta.get("managedFields", []) or []:
            if entry.get("manager") == FIELD_MANAGER_PROBE:
                continue
            if field in (entry.get("fieldsV1", {}).get("f:metadata", {}).get("f:labels", {}) or {}):
                return str(value)
        return None

    def node_event(self, node: str, node_uid: str, *, reason: str, message: str, warning: bool) -> None:
        now = _stamp()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node}.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid or node},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": FIELD_MANAGER_PROBE, "host": node},
            "reportingComponent": FIELD_MANAGER_PROBE,
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.api.request("POST", "/api/v1/namespaces/default/events", body=body)

    def list_pods(self, field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """The pods matching ``field_selector`` now, and the resourceVersion to watch from."""
        params = {"fieldSelector": field_selector} if field_selector else None
        listed = self.api.request("GET", "/api/v1/pods", params=params) or {}
        version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        return [dict(item) for item in listed.get("items") or []], version

    def watch_gpu_pods(
        self, field_selector: str = "", timeout_s: int = 300, resource_version: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, pod) for pods matching ``field_selector``; the caller filters on GPU requests."""
        params: dict[str, Any] = {"timeoutSeconds": timeout_s, "allowWatchBookmarks": "false"}
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version:
            params["resourceVersion"] = resource_version
        for event in self.api.watch("/api/v1/pods", params):
            if event.get("type") == "ERROR":
                raise ApiError("watch pods", int(event.get("object", {}).get("code", 0) or 0), "watch error")
            yield str(event.get("type", "")), dict(event.get("object") or {})
