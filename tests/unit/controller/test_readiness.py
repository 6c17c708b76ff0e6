"""A pass that fails is counted, and after ``readiness_failed_passes`` in a row ``/readyz`` (beside ``/metrics``)
answers 503 until a pass completes again."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from datetime import datetime
from typing import cast

import pytest

from gputopo.control.view import ClusterView
from gputopo.controller.metrics import Metrics
from gputopo.controller.readiness import Readiness
from gputopo.controller.runtime import Runtime, World
from gputopo.controller.settings import OperatorSettings
from gputopo.kube.client import KubeClient
from gputopo.placement import place

FAILING = {
    # (case, pass outcomes in order, ready after them)
    "two failures of three": ([False, False], True),
    "three in a row": ([False, False, False], False),
    "a pass completes again": ([False, False, False, True], True),
    "failures broken by a success": ([False, False, True, False, False], True),
}


@pytest.mark.parametrize(("outcomes", "ready"), FAILING.values(), ids=FAILING.keys())
def test_ready_until_that_many_passes_in_a_row_failed(outcomes: list[bool], ready: bool) -> None:
    metrics = Metrics(readiness=Readiness(failed_passes=3))
    for completed in outcomes:
        if completed:
            metrics.pass_completed()
        else:
            metrics.pass_failed("ValueError: bad")
    assert metrics.readiness.ready is ready
    assert metrics.pass_failures._value.get() == outcomes.count(False)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_readyz_is_served_beside_the_metrics() -> None:
    metrics = Metrics(readiness=Readiness(failed_passes=1))
    port = _free_port()
    metrics.serve(port)
    assert _get(f"http://127.0.0.1:{port}/readyz") == (200, "ok\n")
    metrics.pass_failed("ValueError: Exceeds the limit (4300 digits)")
    status, body = _get(f"http://127.0.0.1:{port}/readyz")
    assert (
        status == 503
        and body == "1 control passes in a row failed, the last: ValueError: Exceeds the limit (4300 digits)\n"
    )
    status, text = _get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "gputopo_control_pass_failures_total 1.0" in text
    assert "gputopo_control_passes_failed_in_a_row 1.0" in text


def test_the_loop_counts_each_failed_pass_and_is_not_ready_after_three() -> None:
    async def main() -> None:
        settings = OperatorSettings(settle_seconds=0, resync_seconds=0.01, readiness_failed_passes=3)
        metrics = Metrics(readiness=Readiness(settings.readiness_failed_passes))
        rt = Runtime(settings, cast(KubeClient, object()), place, metrics=metrics)
        passes: list[bool] = []

        async def run_once(world: World, now: datetime | None = None) -> datetime | None:
            passes.append(True)
            if len(passes) <= 4:
                raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
            return None

        rt.run_once = run_once  # type: ignore[method-assign]
        seen: list[bool] = []

        def stopped() -> bool:
            seen.append(metrics.readiness.ready)
            return len(passes) >= 5

        await rt.run(lambda: World({}, {}, ClusterView({}, {}, ())), stopped)
        assert metrics.pass_failures._value.get() == 4
        assert False in seen and metrics.readiness.ready  # not ready after the third; ready once one completed

    asyncio.run(main())
