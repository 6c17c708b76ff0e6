"""The fake probes on the sandbox: a NodeTopology and labels for every simulated node, faults published
and cleared with Events, and the GPUs each pod holds. Real kube-apiserver; nothing here is mocked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.api.labels import LABEL_GPU_COUNT, LABEL_HEALTH, NODE_LABELS
from gputopo_probe.fake.faults import FaultStore

pytestmark = pytest.mark.integration

TIMEOUT = 30.0  # probes poll every second and go Down after 2 polls; this is the API round trip's slack


def _topology(sandbox: Any, node: str) -> dict[str, Any]:
    out: dict[str, Any] = sandbox.get_json("nodetopology", node)
    return out


def _link(sandbox: Any, node: str, a: int, b: int) -> str:
    links = _topology(sandbox, node).get("status", {}).get("links", [])
    return next((x["state"] for x in links if (x["a"], x["b"]) == (a, b)), "")


def _events(sandbox: Any, node: str, reason: str) -> list[dict[str, Any]]:
    out = sandbox.kubectl(
        "get", "events", "-n", "default", "-o", "json",
        "--field-selector", f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}",
    )  # fmt: skip
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


@pytest.fixture
def faults(sandbox: Any) -> Iterator[FaultStore]:
    store = FaultStore(sandbox.fault_dir)
    yield store
    for node in sandbox.nodes:
        store.clear(node)


def test_every_node_has_a_topology_and_labels(sandbox: Any) -> None:
    for node in sandbox.nodes:
        nt = _topology(sandbox, node)
        k8s_node = sandbox.get_json("node", node)
        labels = k8s_node["metadata"]["labels"]
        assert set(NODE_LABELS) <= set(labels), f"{node} lacks {set(NODE_LABELS) - set(labels)}"
        assert int(labels[LABEL_GPU_COUNT]) == len(nt["status"]["gpus"])
        owners = nt["metadata"].get("ownerReferences", [])
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Node", node, k8s_node["metadata"]["uid"])]
        shown = sandbox.get_json("nodetopology", node, "--show-managed-fields")  # kubectl hides them by default
        managers = {m["manager"] for m in shown["metadata"].get("managedFields", [])}
        assert "gputopo-probe" in managers
        assert nt["status"]["probe"]["backend"] == "fake"


def test_link_fault_is_published_with_events_and_cleared(sandbox: Any, faults: FaultStore) -> None:
    node = sandbox.nodes[0]
    sandbox.wait_for(f"{node} link 0-1 Up", lambda: _link(sandbox, node, 0, 1) == "Up", timeout=TIMEOUT)
    faults.link(node, 0, 1, "down")
    sandbox.wait_for(f"{node} link 0-1 Down", lambda: _link(sandbox, node, 0, 1) == "Down", timeout=TIMEOUT)
    sandbox.wait_for(f"a LinkDown Event on {node}", lambda: _events(sandbox, node, "LinkDown"), timeout=TIMEOUT)
    labels = sandbox.get_json("node", node)["metadata"]["labels"]
    assert labels[LABEL_HEALTH] == "degraded"

    faults.link(node, 0, 1, "up")
    sandbox.wait_for(f"{node} link 0-1 Up again", lambda: _link(sandbox, node, 0, 1) == "Up", timeout=TIMEOUT)
    sandbox.wait_for(f"a LinkUp Event on {node}", lambda: _events(sandbox, node, "LinkUp"), timeout=TIMEOUT)
    sandbox.wait_for(
        f"{node} healthy again",
        lambda: sandbox.get_json("node", node)["metadata"]["labels"][LABEL_HEALTH] == "healthy",
        timeout=TIMEOUT,
    )


def test_gpu_xid_makes_the_gpu_unhealthy_until_cleared(sandbox: Any, faults: FaultStore) -> None:
    node = sandbox.nodes[-1]

    def gpu_state() -> str:
        gpus = _topology(sandbox, node)["status"]["gpus"]
        return str(gpus[0]["health"]["state"])

    faults.gpu(node, 0, xid=79)
    sandbox.wait_for(f"{node} GPU0 Unhealthy", lambda: gpu_state() == "Unhealthy", timeout=TIMEOUT)
    faults.gpu(node, 0, clear=True)
    sandbox.wait_for(f"{node} GPU0 Healthy again", lambda: gpu_state() == "Healthy", timeout=TIMEOUT)


def test_nic_fault_is_published(sandbox: Any, faults: FaultStore) -> None:
    with_nics = [n for n in sandbox.nodes if _topology(sandbox, n)["status"].get("nics")]
    if not with_nics:
        pytest.skip("no simulated node of this profile has RDMA NICs")
    node = with_nics[0]
    name = _topology(sandbox, node)["status"]["nics"][0]["name"]

    def nic_state() -> str:
        nics = _topology(sandbox, node)["status"]["nics"]
        return str(next(x["state"] for x in nics if x["name"] == name))

    faults.nic(node, name, "down")
    sandbox.wait_for(f"{node} {name} Down", lambda: nic_state() == "Down", timeout=TIMEOUT)
    faults.nic(node, name, "up")
    sandbox.wait_for(f"{node} {name} Up", lambda: nic_state() == "Up", timeout=TIMEOUT)


def _idle_node(sandbox: Any) -> str:
    """A node no pod is bound to: an earlier test's pods (still terminating) would hold the GPUs asked for."""
    for name in sandbox.nodes:
        bound = sandbox.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={name}", "-o", "name")
        if not bound.strip():
            return str(name)
    pytest.fail("every sandbox node has pods bound to it")


def test_pod_gpus_are_reported(sandbox: Any) -> None:
    node = _idle_node(sandbox)
    ns = "probe-pods"
    sandbox.kubectl("create", "namespace", ns, check=False)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": ns, "annotations": {"gputopo.io/gpus": "2,3"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:

        def held() -> list[Any]:
            pods = sandbox.get_json("nodepodgpus", node).get("status", {}).get("pods", [])
            return [p["gpus"] for p in pods if (p["namespace"], p["name"]) == (ns, "holder")]

        assert sandbox.wait_for(f"pod GPUs on {node}", held, timeout=TIMEOUT) == [[2, 3]]
    finally:
        sandbox.kubectl("delete", "pod", "-n", ns, "holder", "--wait=false", check=False)
    sandbox.wait_for(f"pod gone from {node}", lambda: not held(), timeout=TIMEOUT)
