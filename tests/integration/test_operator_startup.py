"""An operator beside another: a sandbox's operator listens on ports of its own, and one whose startup cannot
complete exits at once, non-zero, with one line saying why (it does not sit there alive and idle)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import pytest

from gputopo.sandbox.testing import SandboxHandle, run_operator

NS = "startup-test"


@contextlib.contextmanager
def held(*ports: int) -> Iterator[None]:
    """Listen on ``ports`` as the demo sandbox's operator does on its defaults (one held already stays so)."""
    with contextlib.ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with contextlib.suppress(OSError):
                sock.bind(("0.0.0.0", port))
                sock.listen()
        yield


@pytest.mark.timeout(120)
def test_a_sandboxs_operator_starts_while_another_holds_the_default_ports(sandbox: SandboxHandle) -> None:
    box = sandbox.sandbox
    sandbox.kubectl("create", "namespace", NS, check=False)
    settings = {"GPUTOPO_NAMESPACES": NS, "GPUTOPO_OPERATOR_NAMESPACE": NS, "GPUTOPO_IDENTITY": NS}
    try:
        with held(9090, 8080):
            box.start_operator(settings)
            box.wait_for_operator(timeout=60)  # its /healthz answers on its own port
    finally:
        sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        box.stop_operator()


@pytest.mark.timeout(120)
def test_an_operator_whose_startup_the_api_server_refuses_exits_at_once_with_one_line(sandbox: SandboxHandle) -> None:
    env = {
        **os.environ,
        "KUBECONFIG": str(sandbox.kubeconfig),
        "GPUTOPO_NAMESPACES": NS,
        "GPUTOPO_OPERATOR_NAMESPACE": "no-such-namespace",  # its ConfigMap cannot be made there
        "GPUTOPO_METRICS_PORT": "0",
        "GPUTOPO_LIVENESS_PORT": "0",
        "GPUTOPO_LOG_FORMAT": "plain",
    }
    done = run_operator(env, timeout=90)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gputopo-operator: cannot start: create ConfigMap no-such-namespace/"), done.stderr[-2000:]
    assert "404" in last
