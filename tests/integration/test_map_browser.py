"""The live map in a real browser: Debian's headless Chromium, driven over CDP, opens ``gputopo ui`` against the
sandbox; every node and gang is drawn, a link fault made below the probe shows on the page within seconds, and a
screenshot is kept (``$GPUTOPO_TEST_ARTIFACTS``, default ``build/test-artifacts``).

Required in CI (``CI`` set, or ``GPUTOPO_REQUIRE_BROWSER=1`` as ``make test`` sets it, after ``hack/chromium.sh``
installed Debian's chromium); elsewhere skipped, saying why, only when no Chromium is installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputopo.sandbox.browser import Browser, chromium_path
from gputopo.sandbox.faults import link_fault
from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, namespaced_operator, training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "map-test"
ARTIFACTS = Path(os.environ.get("GPUTOPO_TEST_ARTIFACTS", Path(__file__).parents[2] / "build" / "test-artifacts"))
FAULT_SECONDS = 30.0  # the probe's hysteresis and publish, the map's 1 s read and the page's 1 s poll fit well inside

if chromium_path() is None:
    if os.environ.get("CI") or os.environ.get("GPUTOPO_REQUIRE_BROWSER") == "1":
        raise RuntimeError("the map's browser test is required here, and no chromium is on PATH: bash hack/chromium.sh")
    pytest.skip("no chromium on PATH: apt-get install chromium to run the map's browser test", allow_module_level=True)


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("map") / "operator.log"
    with namespaced_operator(sandbox.kubectl, sandbox.kubeconfig, log_file, NS, {}) as proc:
        yield proc


@pytest.fixture
def jobs(sandbox: SandboxHandle, operator: OperatorProcess) -> Iterator[Jobs]:
    with namespace_jobs(sandbox.kubectl, NS, operator) as handle:
        yield handle


@pytest.fixture
def map_url(sandbox: SandboxHandle) -> Iterator[str]:
    """``gputopo ui`` on a free port, as a user starts it; its first line says where."""
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from gputopo.cli.main import app; app()", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, f"gputopo ui said {line!r}"
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _pinned(node: str) -> dict[str, Any]:
    return {"spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "t", "image": "x"}]}}


def _held_gangs(sandbox: SandboxHandle) -> set[str]:
    """Every gang the cluster says holds GPUs: TrainingJobs placed and running, GangPlacements with ranks."""
    out = set()
    for tj in sandbox.get_json("trainingjobs", "-A")["items"]:
        status = tj.get("status") or {}
        if status.get("phase") in ("Placing", "Running", "Rescheduling") and (status.get("placement") or {}).get(
            "workers"
        ):
            out.add(f"{tj['metadata']['namespace']}/{tj['metadata']['name']}")
    for gang in sandbox.get_json("gangplacements", "-A")["items"]:
        status = gang.get("status") or {}
        if status.get("ranks") and status.get("phase") not in ("Released", "Preempted"):
            out.add(f"{gang['metadata']['namespace']}/{gang['metadata']['name']}")
    return out


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen on the map within {timeout:.0f} s: {what}")
        time.sleep(0.25)


def test_the_map_draws_every_node_and_gang_and_shows_a_link_fault(
    sandbox: SandboxHandle, jobs: Jobs, map_url: str
) -> None:
    first, second, faulty = sandbox.free_gpu_nodes(3)
    jobs.apply(training_job("trainer", NS, template=_pinned(first)))
    jobs.apply(training_job("tuner", NS, gpusPerWorker=4, template=_pinned(second)))
    jobs.apply(training_job("huge", NS, workers=12, topology={"interNode": {"requiredTier": 0}}))
    jobs.wait_phase("trainer", "Running", timeout=90)
    jobs.wait_phase("tuner", "Running", timeout=90)
    jobs.wait("huge unplaceable", lambda: (c := jobs.condition("huge", "Placed")) and c["reason"] == "Unplaceable")
    nodes = sorted(t["metadata"]["name"] for t in sandbox.get_json("nodetopology")["items"])
    gangs = _held_gangs(sandbox)
    assert {f"{NS}/trainer", f"{NS}/tuner"} <= gangs

    with Browser(1600, 1000) as page:
        page.goto(map_url)
        drawn = "[...document.querySelectorAll('[data-node]')].map(e => e.dataset.node).sort()"
        _wait("every node", lambda: page.evaluate(drawn) == nodes, 30)
        listed = "[...document.querySelectorAll('[data-gang-id]')].map(e => e.dataset.gangId)"
        _wait("every gang", lambda: set(page.evaluate(listed) or []) == gangs, 30)
        coloured = "[...new Set([...document.querySelectorAll('.gpu.held')].map(e => e.dataset.gang))]"
        assert set(page.evaluate(coloured)) == gangs  # each gang's GPUs are drawn in its colour
        held = f"document.querySelectorAll('[data-node=\"{first}\"] .gpu.held').length"
        assert page.evaluate(held) == 8
        pending = "[...document.querySelectorAll('[data-pending]')].map(e => [e.dataset.pending, e.textContent])"
        said = dict(_wait("the pending gang", lambda: page.evaluate(pending), 30))
        assert "TopologyPlacementFailed" in said[f"{NS}/huge"] and "Closest domains:" in said[f"{NS}/huge"]
        faults = f"document.querySelector('[data-node=\"{faulty}\"]').dataset.faults"
        assert page.evaluate(faults) == ""

        link_fault(sandbox.sandbox, faulty, 0, 1, "down")
        try:
            start = time.monotonic()
            _wait("the link fault", lambda: "link 0-1 Down" in (page.evaluate(faults) or ""), FAULT_SECONDS)
            seen_after = time.monotonic() - start
            marker = f"document.querySelector('[data-node=\"{faulty}\"] .fault.link').dataset.fault"
            assert page.evaluate(marker) == "link 0-1 Down"
            shot = page.screenshot(ARTIFACTS / "map.png")
        finally:
            link_fault(sandbox.sandbox, faulty, 0, 1, "up")
    assert shot.stat().st_size > 10_000
    print(f"link fault on the map after {seen_after:.1f} s; screenshot {shot}")
