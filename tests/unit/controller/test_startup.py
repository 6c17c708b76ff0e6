"""An operator whose startup cannot complete exits non-zero with one line saying why, instead of idling alive."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from typing import Any, cast

import kopf
import pytest

from gputopo.controller.handlers import register
from gputopo.controller.metrics import Metrics
from gputopo.controller.runtime import Runtime
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.startup import StartupError, startup_failure
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError, KubeconfigError
from gputopo.placement import place
from gputopo.sandbox.testing import run_operator


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on (as the demo sandbox's operator held 9090)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("taken", ["metrics", "liveness"])
def test_an_operator_whose_port_is_taken_exits_non_zero_with_one_line_naming_it(taken: str, taken_port: int) -> None:
    env = {
        **os.environ,
        "GPUTOPO_METRICS_PORT": str(taken_port) if taken == "metrics" else "0",
        "GPUTOPO_LIVENESS_PORT": str(taken_port) if taken == "liveness" else "0",
        "KUBECONFIG": os.devnull,  # never reached: the ports come first
    }
    done = run_operator(env, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"{taken} port {taken_port}" in lines[0]
    assert "in use" in lines[0]


def startup_handler(make_runtime: Any) -> Any:
    registry = kopf.OperatorRegistry()
    register(registry, OperatorSettings(standalone=True), make_runtime)
    (handler,) = [h for h in registry._activities._handlers if h.id == "startup"]
    return handler


class RefusingClient:
    def __init__(self, status: int) -> None:
        self.status = status

    async def ensure_config_map(self, namespace: str, name: str) -> None:
        raise ApiError(f"create ConfigMap {namespace}/{name}", self.status, "Forbidden" if self.status else "")


def call(handler: Any) -> None:
    asyncio.run(handler.fn(memo=kopf.Memo(), settings=kopf.OperatorSettings()))


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(403, kopf.PermanentError), (0, kopf.TemporaryError)],
    ids=["refused-ends-it", "unreachable-tried-again"],
)
def test_a_startup_the_api_server_refuses_ends_and_one_it_cannot_reach_yet_is_tried_again(
    status: int, outcome: type[Exception]
) -> None:
    def make_runtime() -> Runtime:
        return Runtime(OperatorSettings(), cast(KubeClient, RefusingClient(status)), place, metrics=Metrics())

    with pytest.raises(outcome) as raised:
        call(startup_handler(make_runtime))
    failure = startup_failure(raised.value)
    assert failure is not None
    assert "ConfigMap" in str(failure)


def test_a_startup_without_credentials_ends() -> None:
    def make_runtime() -> Runtime:
        raise KubeconfigError("no kubeconfig")

    handler = startup_handler(make_runtime)
    assert handler.errors == kopf.ErrorsMode.PERMANENT  # nothing else is retried every minute, forever
    with pytest.raises(kopf.PermanentError) as raised:
        call(handler)
    assert isinstance(startup_failure(raised.value), StartupError)


def test_the_failure_is_found_through_kopfs_wrapping() -> None:
    cause = StartupError("cannot listen")
    try:
        try:
            raise kopf.PermanentError(str(cause)) from cause
        except kopf.PermanentError as handler_error:
            raise RuntimeError("One or more handlers failed.") from handler_error
    except RuntimeError as wrapped:
        assert startup_failure(wrapped) is cause
    assert startup_failure(RuntimeError("a bug")) is None
