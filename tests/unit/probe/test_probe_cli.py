"""The command line: ``--once --print`` over a fake, argument contracts, and the HTTP endpoints."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from probe_builders import FIXTURES

from gputopo.api.nodetopology import NodeTopology
from gputopo_probe.main import build_farm_parser, build_parser, main
from gputopo_probe.publish.server import Metrics, ProbeServer, parse_listen

H100 = FIXTURES / "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt"


def test_once_print_over_a_fake(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--once", "--print", "--fake", str(H100), "--node-name", "gpu-7"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    topology = NodeTopology.model_validate(doc)
    assert topology.name == "gpu-7"
    assert len(topology.status.gpus) == 8 and len(topology.status.links) == 28 and len(topology.status.nics) == 8
    assert topology.status.probe.backend == "fake"
    assert {link.kind.value for link in topology.status.links} == {"NVSwitch"}


def test_unknown_topology_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--once", "--print", "--fake", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err


def test_contract_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    args = build_parser().parse_args([])
    assert (args.node_name, args.interval, args.down_after, args.up_after, args.listen) == (
        "from-env",
        None,
        2,
        2,
        "0.0.0.0:8080",
    )
    assert args.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert args.fake_allocation == "plan"
    farm = build_farm_parser().parse_args(["--nodes-file", "n.yaml", "--kubeconfig", "k", "--fault-dir", "f"])
    assert (farm.nodes_file, farm.kubeconfig, farm.fault_dir) == ("n.yaml", "k", "f")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", None), ("off", None), ("127.0.0.1:9000", ("127.0.0.1", 9000)), (":8080", ("0.0.0.0", 8080))],
    ids=["zero", "off", "host-port", "port-only"],
)
def test_parse_listen(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_listen(text) == expected


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_health_endpoints() -> None:
    ready = {"value": False}
    metrics = Metrics()
    metrics.polls.labels("n1").inc()
    server = ProbeServer(("127.0.0.1", 0), metrics, lambda: True, lambda: ready["value"]).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert _get(base + "/healthz")[0] == 200
        assert _get(base + "/readyz")[0] == 503
        ready["value"] = True
        assert _get(base + "/readyz")[0] == 200
        status, body = _get(base + "/metrics")
        assert status == 200 and 'gputopo_probe_polls_total{node="n1"} 1.0' in body
        assert _get(base + "/nope")[0] == 404
    finally:
        server.stop()
