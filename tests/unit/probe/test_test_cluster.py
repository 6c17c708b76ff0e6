"""Fake mode publishes only on a declared test cluster: the probe refuses it before touching the API server
unless GPUTOPO_PROBE_TEST_CLUSTER is true; ``--once --print`` writes nothing and needs no declaration."""

from __future__ import annotations

from pathlib import Path

import pytest
from probe_builders import FIXTURES

from gputopo_probe.main import main
from gputopo_probe.testcluster import TEST_CLUSTER_ENV, TestClusterError, require_test_cluster

H100 = str(FIXTURES / "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt")

DECLARED = [
    ("true", {TEST_CLUSTER_ENV: "true"}, True),
    ("yes-any-case", {TEST_CLUSTER_ENV: " YES "}, True),
    ("one", {TEST_CLUSTER_ENV: "1"}, True),
    ("unset", {}, False),
    ("false", {TEST_CLUSTER_ENV: "false"}, False),
    ("empty", {TEST_CLUSTER_ENV: ""}, False),
    ("anything-else", {TEST_CLUSTER_ENV: "prod"}, False),
]


@pytest.mark.parametrize(("case", "environ", "allowed"), DECLARED, ids=[c[0] for c in DECLARED])
def test_only_a_declared_test_cluster_allows_fake_mode(case: str, environ: dict[str, str], allowed: bool) -> None:
    if allowed:
        require_test_cluster("--fake", environ)
        return
    with pytest.raises(TestClusterError, match=f"set {TEST_CLUSTER_ENV}=true") as info:
        require_test_cluster("--fake", environ)
    assert "\n" not in str(info.value), case


REFUSED = [
    ("single-node", ["--fake", H100, "--node-name", "n1", "--once", "--listen", "off"], "--fake publishes fake GPUs"),
    ("farm", ["farm", "--nodes-file", "nodes.yaml", "--listen", "off"], "gputopo-probe farm publishes fake GPUs"),
]


@pytest.mark.parametrize(("case", "argv", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_fake_mode_that_would_publish_is_refused_without_the_declaration(
    case: str, argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.delenv(TEST_CLUSTER_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # never reached
    assert main(argv) == 2, case
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_once_print_needs_no_declaration(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(TEST_CLUSTER_ENV, raising=False)
    assert main(["--once", "--print", "--fake", H100, "--node-name", "n1"]) == 0
    assert "kind: NodeTopology" in capsys.readouterr().out
