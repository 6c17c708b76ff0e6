"""Kueue's manager in a sandbox: its configuration (loopback ports, its own certificates, no leader election), the
certificates of its Secret written where it reads them, and a manager that exits is an error with its last words."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from gputopo.sandbox import SandboxError, processes
from gputopo.sandbox.kueue import FRAMEWORKS, KueueManager, KueuePorts, manager_configuration


def test_the_configuration_keeps_the_manager_on_loopback_ports_with_its_own_certificates(tmp_path: Path) -> None:
    config = manager_configuration(KueuePorts(webhook=1, health=2, metrics=3), tmp_path)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:2"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:3"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"]["enable"] is True
    assert config["integrations"]["frameworks"] == list(FRAMEWORKS)


def test_each_start_gets_ports_of_its_own() -> None:
    ports = KueuePorts.free()
    assert len({ports.webhook, ports.health, ports.metrics}) == 3


class Secret:
    """A kubectl that answers ``get secret`` with the given data (None: no such secret)."""

    def __init__(self, data: dict[str, bytes] | None) -> None:
        self.data = data

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        if self.data is None:
            return ""
        encoded = {k: base64.b64encode(v).decode() for k, v in self.data.items()}
        return json.dumps({"kind": "Secret", "data": encoded})


@pytest.mark.parametrize(
    ("data", "written"),
    [
        pytest.param(None, {}, id="no-secret-yet"),
        pytest.param({}, {}, id="secret-not-filled-yet"),
        pytest.param({"tls.crt": b"CERT"}, {}, id="key-missing"),
        pytest.param(
            {"tls.crt": b"CERT", "tls.key": b"KEY", "ca.crt": b"CA"},
            {"tls.crt": b"CERT", "tls.key": b"KEY"},
            id="filled",
        ),
    ],
)
def test_the_secrets_certificate_is_written_once_it_is_filled(
    tmp_path: Path, data: dict[str, bytes] | None, written: dict[str, bytes]
) -> None:
    manager = KueueManager(tmp_path, tmp_path / "kubeconfig", Secret(data))
    manager.cert_dir.mkdir(parents=True)
    manager._mount_certificates()
    assert {p.name: p.read_bytes() for p in manager.cert_dir.iterdir()} == written


def test_a_manager_that_exits_is_an_error_with_its_last_words(tmp_path: Path) -> None:
    manager = KueueManager(tmp_path, tmp_path / "kubeconfig", Secret(None))
    argv = [sys.executable, "-c", "print('unable to load the configuration'); raise SystemExit(1)"]
    processes.start(argv, pid_file=manager.pid_file, log_file=manager.log_file)
    try:
        with pytest.raises(SandboxError, match="exited: unable to load the configuration"):
            manager.wait_ready(KueuePorts(*processes.free_ports(3)), timeout=30)
    finally:
        processes.stop(manager.pid_file)
