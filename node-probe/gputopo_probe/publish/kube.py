"""The Kubernetes boundary of the probe: the few API calls it makes, with ApiException translated."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gputopo.api.group import FIELD_MANAGER_PROBE, GROUP, VERSION
from gputopo.api.nodetopology import NodeTopology
from gputopo_probe.errors import ApiError

__all__ = ["Kube", "load_api_client"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_APPLY = "application/apply-patch+yaml"
_APPLY_ARGS: dict[str, Any] = {"field_manager": FIELD_MANAGER_PROBE, "force": True, "_content_type": _APPLY}
_config: Any = config  # the kubernetes config loaders are untyped


def load_api_client(kubeconfig: str | Path | None = None) -> client.ApiClient:
    """``kubeconfig`` if given, else the in-cluster service account, else ``$KUBECONFIG``."""
    try:
        if kubeconfig:
            api: client.ApiClient = _config.new_client_from_config(config_file=str(kubeconfig))
            return api
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            _config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        api = _config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
        return api
    except (_config.ConfigException, OSError) as error:
        raise ApiError("load kubeconfig", 0, str(error)) from error


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as error:
        raise ApiError(what, int(error.status or 0), str(error.reason or "")) from error
    except (HTTPError, OSError) as error:
        raise ApiError(what, 0, str(error)) from error


def _stamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api: Any = api
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    def node_uid(self, name: str) -> str:
        node = _call(f"get node {name}", lambda: self.core.read_node(name))
        return str(node.metadata.uid) if node.metadata else ""

    def apply_node_topology(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        """Server-side apply of NodeTopology/<name> (owned by its Node), then of its status."""
        meta: dict[str, Any] = {"name": name}
        if node_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid, "blockOwnerDeletion": False}
            ]
        head = {"apiVersion": f"{GROUP}/{VERSION}", "kind": NodeTopology.kind, "metadata": meta}
        body = {**head, "status": status}
        plural = NodeTopology.plural

        def apply_status() -> object:
            return self.custom.patch_cluster_custom_object_status(GROUP, VERSION, plural, name, body, **_APPLY_ARGS)

        try:
            _call(f"apply nodetopology {name} status", apply_status)
        except ApiError as error:
            if error.status != 404:
                raise
            _call(
                f"apply nodetopology {name}",
                lambda: self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, head, **_APPLY_ARGS),
            )
            _call(f"apply nodetopology {name} status", apply_status)

    def apply_node_labels(self, name: str, labels: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        _call(f"apply labels of node {name}", lambda: self.core.patch_node(name, body, **_APPLY_ARGS))

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
        _call(f"create event for node {node}", lambda: self.core.create_namespaced_event("default", body))

    def watch_gpu_pods(self, field_selector: str = "", timeout_s: int = 300) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, pod as a dict) for pods; the caller filters on GPU requests and node names."""
        stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in stream.stream(
                self.core.list_pod_for_all_namespaces, field_selector=field_selector, timeout_seconds=timeout_s
            ):
                yield str(event["type"]), self.api.sanitize_for_serialization(event["object"])
        except ApiException as error:
            raise ApiError("watch pods", int(error.status or 0), str(error.reason or "")) from error
        except (HTTPError, OSError) as error:
            raise ApiError("watch pods", 0, str(error)) from error
        finally:
            stream.stop()
