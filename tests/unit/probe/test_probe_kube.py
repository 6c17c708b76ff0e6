"""The probe's Kubernetes calls over HTTP, against a local recording server; kubeconfig loading."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gputopo_probe.errors import ApiError
from gputopo_probe.publish.kube import Kube
from gputopo_probe.publish.rest import ApiClient, Credentials, load_credentials


class FakeApiServer:
    """Answers like kube-apiserver for the few paths the probe uses, and records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.topologies: set[str] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length", 0))
                return json.loads(self.rfile.read(length)) if length else None

            def do_GET(self) -> None:
                owner.requests.append(("GET", self.path, "", None))
                if self.path.startswith("/api/v1/nodes/"):
                    self._reply(200, {"metadata": {"name": "n1", "uid": "uid-n1"}})
                elif self.path.startswith("/api/v1/pods?"):
                    lines = [
                        {"type": "ADDED", "object": {"metadata": {"name": "p"}}},
                        {"type": "DELETED", "object": {}},
                    ]
                    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._reply(404, {"message": "not found"})

            def do_PATCH(self) -> None:
                body = self._body()
                owner.requests.append(("PATCH", self.path, self.headers["Content-Type"], body))
                parts = self.path.split("?")[0].split("/")
                name = "/".join(parts[4:6]) if len(parts) > 5 and parts[2] == "gputopo.io" else ""
                if self.path.split("?")[0].endswith("/status") and name not in owner.topologies:
                    self._reply(404, {"message": f"{name} not found"})
                    return
                if name:
                    owner.topologies.add(name)
                self._reply(200, body)

            def do_POST(self) -> None:
                body = self._body()
                owner.requests.append(("POST", self.path, self.headers["Content-Type"], body))
                self._reply(500 if body.get("reason") == "Boom" else 201, body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, Kube]]:
    server = FakeApiServer()
    client = ApiClient(Credentials(server.url, token="t0ken"))
    yield server, Kube(client)
    client.close()
    server.httpd.shutdown()


def test_server_side_apply_creates_then_applies_status(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    kube.apply_node_topology("n1", "uid-n1", {"gpus": []})
    kube.apply_node_topology("n1", "uid-n1", {"gpus": [{"index": 0}]})
    patches = [(path.split("?")[0], ctype) for method, path, ctype, _ in server.requests if method == "PATCH"]
    base = "/apis/gputopo.io/v1alpha1/nodetopologies/n1"
    assert (
        patches
        == [(base + "/status", "application/apply-patch+yaml"), (base, "application/apply-patch+yaml")]
        + [(base + "/status", "application/apply-patch+yaml")] * 2
    )
    first_create = server.requests[1]
    assert "fieldManager=gputopo-probe" in first_create[1] and "force=true" in first_create[1]
    assert first_create[3]["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1", "blockOwnerDeletion": False,
    }  # fmt: skip


def test_the_pods_object_is_created_then_applied_the_same_way(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    kube.apply_node_topology("n1", "uid-n1", {"gpus": []})
    kube.apply_node_pod_gpus("n1", "uid-n1", {"pods": []})
    kube.apply_node_pod_gpus("n1", "uid-n1", {"pods": [{"namespace": "ml", "name": "p", "gpus": [0]}]})
    base = "/apis/gputopo.io/v1alpha1/nodepodgpus/n1"
    patches = [path.split("?")[0] for method, path, _, _ in server.requests if method == "PATCH" and base in path]
    assert patches == [base + "/status", base, base + "/status", base + "/status"]
    created = next(b for m, p, _, b in server.requests if m == "PATCH" and p.split("?")[0] == base)
    assert created["kind"] == "NodePodGpus" and created["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"


def test_labels_events_and_node_uid(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    assert kube.node_uid("n1") == "uid-n1"
    kube.apply_node_labels("n1", {"gputopo.io/health": "healthy"})
    kube.node_event("n1", "uid-n1", reason="LinkDown", message="link 0-1: Up -> Down", warning=True)
    _, path, _, labels = server.requests[1]
    assert path.startswith("/api/v1/nodes/n1?") and labels["metadata"]["labels"] == {"gputopo.io/health": "healthy"}
    _, path, _, event = server.requests[2]
    assert path == "/api/v1/namespaces/default/events"
    assert (event["type"], event["reason"], event["involvedObject"]["uid"]) == ("Warning", "LinkDown", "uid-n1")


def test_errors_carry_the_status(api: tuple[FakeApiServer, Kube]) -> None:
    _, kube = api
    with pytest.raises(ApiError) as caught:
        kube.node_event("n1", "u", reason="Boom", message="", warning=False)
    assert caught.value.status == 500 and caught.value.retryable


def test_unreachable_server_is_status_zero() -> None:
    client = ApiClient(Credentials("http://127.0.0.1:9"))
    with pytest.raises(ApiError) as caught:
        Kube(client).node_uid("n1")
    assert caught.value.status == 0 and caught.value.retryable


def test_watch_stream(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    events = list(kube.watch_gpu_pods("spec.nodeName=n1", timeout_s=5))
    assert [e for e, _ in events] == ["ADDED", "DELETED"]
    assert "fieldSelector=spec.nodeName%3Dn1" in server.requests[0][1] and "watch=1" in server.requests[0][1]


def _kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "b",
        "contexts": [
            {"name": "a", "context": {"cluster": "x", "user": "x"}},
            {"name": "b", "context": {"cluster": "c", "user": "u"}},
        ],
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443/", **cluster}}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "config"
    path.write_text(json.dumps(doc))
    return path


def test_kubeconfig_files_relative_to_it(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path, {"client-certificate": "pki/a.crt", "client-key": "/abs/a.key"}, {"certificate-authority": "ca.crt"}
    )
    creds = load_credentials(path)
    assert creds.server == "https://10.0.0.1:6443"
    assert (creds.ca_file, creds.cert_file, creds.key_file) == (
        str(tmp_path / "ca.crt"),
        str(tmp_path / "pki/a.crt"),
        "/abs/a.key",
    )


def test_kubeconfig_inline_data_and_token(tmp_path: Path) -> None:
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    creds = load_credentials(_kubeconfig(tmp_path, {"token": "abc"}, {"certificate-authority-data": pem}))
    assert creds.token == "abc" and creds.ca_file and Path(creds.ca_file).read_bytes().startswith(b"-----BEGIN")


def test_exec_credentials_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ApiError, match="exec"):
        load_credentials(_kubeconfig(tmp_path, {"exec": {"command": "aws"}}, {}))


def test_once_publishes_a_fake_node(
    api: tuple[FakeApiServer, Kube], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gputopo-probe --fake … --once`` end to end against the recording API server."""
    from gputopo_probe.main import main

    monkeypatch.setenv("GPUTOPO_PROBE_TEST_CLUSTER", "true")
    server, _ = api
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": server.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        })
    )  # fmt: skip
    fixture = Path(__file__).resolve().parents[3] / "operator/gputopo/topology/fixtures/nvidia-smi"
    argv = ["--fake", str(fixture / "dgx-a100-8gpu-nv12-10xmlx5.txt"), "--node-name", "n1", "--once"]
    assert main([*argv, "--kubeconfig", str(kubeconfig), "--listen", "off"]) == 0
    writes = {(m, p.split("?")[0]) for m, p, _, _ in server.requests if m == "PATCH"}
    base = "/apis/gputopo.io/v1alpha1/nodetopologies/n1"
    pods = "/apis/gputopo.io/v1alpha1/nodepodgpus/n1"
    assert writes == {
        ("PATCH", base), ("PATCH", base + "/status"), ("PATCH", pods), ("PATCH", pods + "/status"),
        ("PATCH", "/api/v1/nodes/n1"),
    }  # fmt: skip
    status = next(b for m, p, _, b in server.requests if p.startswith(base + "/status") and b)["status"]
    assert len(status["gpus"]) == 8 and len(status["nics"]) == 10
