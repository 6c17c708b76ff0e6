"""The operator's API client against the real API server: each call, and each error in the operator's words."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from client_calls import run

from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.kube.client import KubeClient, load_configuration
from gputopo.kube.errors import AlreadyExistsError, ApiError, ConflictError, NotFoundError
from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-client-it"
T = TypeVar("T")


@pytest.fixture(scope="module")
def namespace(sandbox: SandboxHandle) -> Iterator[str]:
    sandbox.kubectl("create", "namespace", NS, check=False)
    yield NS
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def a_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def test_create_and_delete_are_idempotent(sandbox: SandboxHandle, namespace: str) -> None:
    body = a_pod("client-pod")
    assert run(sandbox, lambda c: c.create_pod(body)) is True
    assert run(sandbox, lambda c: c.create_pod(body)) is False  # exists: the wanted state already holds
    pod = sandbox.get_json("pod", "-n", namespace, "client-pod", "--show-managed-fields")
    assert any(m.get("manager") == "gputopo-operator" for m in pod["metadata"]["managedFields"])
    run(sandbox, lambda c: c.delete_pod(namespace, "client-pod", 0))
    run(sandbox, lambda c: c.delete_pod(namespace, "client-pod", 0))  # gone already: no error


def test_status_writes_and_job_deletion(sandbox: SandboxHandle, namespace: str) -> None:
    job = {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "client-job", "namespace": namespace},
        "spec": {"workers": 1, "gpusPerWorker": 1, "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}},
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(job))
    status = TrainingJobStatus(phase=JobPhase.PENDING, restarts=2)
    version = run(sandbox, lambda c: c.write_status(namespace, "client-job", status))
    stored = sandbox.get_json("trainingjob", "-n", namespace, "client-job")
    assert stored["metadata"]["resourceVersion"] == version
    assert stored["status"]["phase"] == "Pending" and stored["status"]["restarts"] == 2
    run(sandbox, lambda c: c.delete_job(namespace, "client-job"))
    run(sandbox, lambda c: c.delete_job(namespace, "client-job"))
    with pytest.raises(NotFoundError, match="404 NotFound"):
        run(sandbox, lambda c: c.write_status(namespace, "client-job", status))


def test_errors_are_translated(sandbox: SandboxHandle, namespace: str) -> None:
    run(sandbox, lambda c: c.ensure_config_map(namespace, "client-cm"))
    run(sandbox, lambda c: c.ensure_config_map(namespace, "client-cm"))  # exists: fine

    async def create_twice(c: KubeClient) -> None:
        body = {"metadata": {"name": "client-cm", "namespace": namespace}}
        await c._request("create", "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body)

    with pytest.raises(AlreadyExistsError):
        run(sandbox, create_twice)

    async def stale_update(c: KubeClient) -> None:
        patch = {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}
        await c._request(
            "stale",
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/client-cm",
            body=patch,
            content_type="application/merge-patch+json",
        )

    with pytest.raises(ConflictError) as conflict:
        run(sandbox, stale_update)
    assert not isinstance(conflict.value, AlreadyExistsError)

    bad = a_pod("Not_A_Name")
    with pytest.raises(ApiError) as invalid:
        run(sandbox, lambda c: c.create_pod(bad))
    assert invalid.value.status == 422 and invalid.value.reason == "Invalid"
    assert "Not_A_Name" in str(invalid.value)


def test_the_finalizer_is_dropped(sandbox: SandboxHandle, namespace: str) -> None:
    run(sandbox, lambda c: c.ensure_config_map(namespace, "client-fin"))
    sandbox.kubectl(
        "patch",
        "configmap",
        "-n",
        namespace,
        "client-fin",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["gputopo.io/operator","example.com/keep"]}}',
    )
    run(sandbox, lambda c: c.drop_finalizer(namespace, "client-fin", "gputopo.io/operator"))
    meta = sandbox.get_json("configmap", "-n", namespace, "client-fin")["metadata"]
    assert meta["finalizers"] == ["example.com/keep"]
    sandbox.kubectl(
        "patch", "configmap", "-n", namespace, "client-fin", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    run(sandbox, lambda c: c.drop_finalizer(namespace, "never-was", "gputopo.io/operator"))


def test_an_unreachable_server_is_an_api_error_with_status_0(sandbox: SandboxHandle) -> None:
    configuration = load_configuration(str(sandbox.kubeconfig))
    configuration.host = "https://127.0.0.1:1"

    async def go() -> None:
        client = KubeClient(configuration, timeout_seconds=5)
        try:
            await client.ensure_config_map(NS, "x")
        finally:
            await client.close()

    with pytest.raises(ApiError) as error:
        asyncio.run(go())
    assert error.value.status == 0


def test_the_reflector_lists_in_pages_and_follows_changes(sandbox: SandboxHandle, namespace: str) -> None:
    from gputopo.kube.reflector import Reflector, Rhythm

    for i in range(5):
        sandbox.kubectl("create", "configmap", f"refl-{i}", "-n", namespace, f"--from-literal=v={i}")
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    async def go() -> None:
        client = KubeClient(load_configuration(str(sandbox.kubeconfig)), concurrency=4)
        changes: list[int] = []
        deleted: list[str] = []
        reflector: Reflector[str] = Reflector(
            client,
            "ConfigMaps",
            path,
            lambda name, obj, before: str((obj.get("data") or {}).get("v", "")),
            on_change=lambda: changes.append(1),
            on_delete=deleted.append,
            rhythm=Rhythm(page_size=2, watch_seconds=30),  # five objects: three pages
        )
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), 20)
            refl = {k: v for k, v in reflector.items.items() if k.startswith("refl-")}
            assert refl == {f"refl-{i}": str(i) for i in range(5)}
            assert reflector.lists == 1 and changes

            async def until(what: str, ok: Callable[[], bool]) -> None:
                for _ in range(200):
                    if ok():
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(what)

            await asyncio.to_thread(
                sandbox.kubectl, "patch", "configmap", "refl-1", "-n", namespace, "-p", '{"data":{"v":"changed"}}'
            )
            await until("the change is seen", lambda: reflector.items.get("refl-1") == "changed")
            await asyncio.to_thread(sandbox.kubectl, "delete", "configmap", "refl-2", "-n", namespace)
            await until("the deletion is seen", lambda: "refl-2" not in reflector.items)
            assert deleted == ["refl-2"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await client.close()

    asyncio.run(go())


def test_open_watches_leave_requests_their_connections(sandbox: SandboxHandle, namespace: str) -> None:
    """One request at a time and three watches open: a watch holds a connection for its whole life, and the
    request still goes out at once (it waited for a free connection until its timeout when watches counted)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    async def go() -> None:
        client = KubeClient(load_configuration(str(sandbox.kubeconfig)), concurrency=1, timeout_seconds=10)

        async def watch() -> None:
            async for _ in client.watch("watch ConfigMaps", path, {}, read_timeout=60):
                pass

        watches = [asyncio.create_task(watch()) for _ in range(3)]
        try:
            await asyncio.sleep(1.0)  # the watches' connections are open
            await asyncio.wait_for(client.ensure_config_map(namespace, "beside-watches"), 5)
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await client.close()

    asyncio.run(go())
    assert sandbox.get_json("configmap", "-n", namespace, "beside-watches")["metadata"]["name"] == "beside-watches"
