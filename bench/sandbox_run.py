"""Running a trace on the sandbox, as both sandbox benchmarks do: the command line they share, API clients, the
operator started as the chart runs it, one submission of a whole trace and the wait until it settles.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from gang_trace import Job, trace_config
from gputopo.kube.client import load_configuration
from gputopo.sandbox import Sandbox

__all__ = [
    "Settled",
    "TraceRun",
    "add_run_arguments",
    "clients",
    "log_problems",
    "logger",
    "operator_running",
    "run_config",
    "settle",
    "start_operator",
    "submit_and_settle",
    "training_job_items",
    "wait_control_loop",
    "wait_no_pods",
]


def add_run_arguments(parser: argparse.ArgumentParser, sandbox: str) -> None:
    """The options every trace run takes: the sandbox's name and size, the trace, when a side is settled."""
    parser.add_argument("--sandbox", default=sandbox)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quiet", type=float, default=15.0, help="settled: nothing new Running this long (s)")
    parser.add_argument("--deadline", type=float, default=300.0, help="longest wait of one side (s)")


def logger(bench: str) -> Callable[[str], None]:
    """A benchmark's progress lines on stderr, each opening with ``[bench]``."""

    def log(message: str) -> None:
        print(f"[{bench}] {message}", file=sys.stderr, flush=True)

    return log


def clients(box: Sandbox) -> tuple[Any, Any]:
    """The sandbox's core and custom-objects APIs."""
    api = k8s.ApiClient(load_configuration(str(box.kubeconfig)))
    return k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)


@dataclass(frozen=True)
class TraceRun:
    """What each side of a trace run works with: the sandbox and its API clients, the trace, the options."""

    box: Sandbox
    core: Any
    custom: Any
    trace: Sequence[Job]
    args: argparse.Namespace

    @classmethod
    def on(cls, box: Sandbox, trace: Sequence[Job], args: argparse.Namespace) -> TraceRun:
        return cls(box, *clients(box), trace, args)


def training_job_items(custom: Any, namespace: str) -> list[dict[str, Any]]:
    """Every TrainingJob of ``namespace``, as the API server has it now."""
    listed = custom.list_namespaced_custom_object("gputopo.io", "v1alpha1", namespace, "trainingjobs")
    return list(listed["items"])


def settle(count: Callable[[], int], expected: int, t0: float, quiet: float, deadline: float) -> str:
    """Wait until ``expected`` pods run, or nothing new started for ``quiet`` s, or ``deadline`` s passed."""
    last, changed = -1, time.monotonic()
    while True:
        now = time.monotonic()
        n = count()
        if n != last:
            last, changed = n, now
        if n >= expected:
            return "all pods Running"
        if n > 0 and now - changed >= quiet:
            return f"nothing new Running for {quiet:.0f} s"
        if now - t0 >= deadline:
            return f"deadline of {deadline:.0f} s"
        time.sleep(0.25)


@dataclass(frozen=True)
class Settled:
    """One submission: when it began (wall and monotonic clocks), how long ``kubectl create`` and the whole
    side took, and why the side counts as settled."""

    wall0: float
    t0: float
    submit_s: float
    settled_s: float
    because: str

    def result_head(self, namespace: str, objects: int, pods: int) -> dict[str, Any]:
        """The figures a side's result opens with: what it submitted, how long that and settling took, why it
        counts as settled, and how many pods should run."""
        return {
            "namespace": namespace,
            "objects_submitted": objects,
            "submit_seconds": self.submit_s,
            "settled_after_s": self.settled_s,
            "settled_because": self.because,
            "pods_expected": pods,
        }


def submit_and_settle(
    box: Sandbox,
    manifest: Mapping[str, Any],
    running: Callable[[], int],
    expected: int,
    args: argparse.Namespace,
) -> Settled:
    """The whole ``manifest`` in one ``kubectl create``, then wait until ``expected`` pods run (``running``
    counts them) or the side settles (``args.quiet``, ``args.deadline``)."""
    wall0, t0 = time.time(), time.monotonic()
    box.kubectl("create", "-f", "-", input=json.dumps(manifest), timeout=600)
    submitted = time.monotonic() - t0
    why = settle(running, expected, t0, args.quiet, args.deadline)
    return Settled(wall0, t0, submitted, time.monotonic() - t0, why)


def wait_no_pods(box: Sandbox, core: Any, namespace: str, reported: Callable[[], int], timeout: float = 120.0) -> None:
    """Delete every pod of ``namespace`` and wait until neither the API nor any probe report (``reported``
    counts those) shows one."""
    box.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = len(core.list_namespaced_pod(namespace).items)
        if left == 0 and reported() == 0:
            return
        time.sleep(1.0)
    raise TimeoutError(f"pods of {namespace} still there after {timeout:.0f} s")


def wait_control_loop(log_file: Path, offset: int, timeout: float = 180.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with log_file.open("rb") as f:
                f.seek(offset)
                if b"control loop started" in f.read():
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"the operator's control loop did not start within {timeout:.0f} s; see {log_file}")


def start_operator(
    box: Sandbox, namespace: str, identity: str, settings: Mapping[str, str] | None = None
) -> tuple[int, float, Path, int]:
    """The operator over all namespaces, as the chart runs it; (pid, seconds to its loop, log, log offset).
    ``settings``: more ``GPUTOPO_*`` variables (a metrics port, say)."""
    log_file = box.log_dir / "operator.log"
    offset = log_file.stat().st_size if log_file.exists() else 0
    box.start_operator(
        {
            "GPUTOPO_OPERATOR_NAMESPACE": namespace,
            "GPUTOPO_IDENTITY": identity,
            "GPUTOPO_METRICS_PORT": "0",
            "GPUTOPO_LIVENESS_PORT": "0",
            "GPUTOPO_LOG_FORMAT": "plain",
            **(settings or {}),
        }
    )
    pid = int((box.dir / "pids" / "operator.pid").read_text().strip())
    return pid, wait_control_loop(log_file, offset), log_file, offset


@contextmanager
def operator_running(
    box: Sandbox,
    namespace: str,
    identity: str,
    log: Callable[[str], None],
    settings: Mapping[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The operator (``start_operator``, with ``settings``) for the block's length, stopped after it whatever
    happens. Yields the figures a side reports of it: ``control_loop_up_s`` at once, ``operator_log`` (its
    problems) once stopped."""
    pid, loop_s, log_file, offset = start_operator(box, namespace, identity, settings)
    log(f"operator pid {pid}: control loop up after {loop_s:.1f} s")
    facts: dict[str, Any] = {"control_loop_up_s": loop_s}
    try:
        yield facts
    finally:
        box.stop_operator()
        facts["operator_log"] = log_problems(log_file, offset)


def log_problems(log_file: Path, offset: int) -> dict[str, Any]:
    with log_file.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    bad = [line for line in lines if "Traceback" in line or " ERROR " in line or "[ERROR" in line]
    return {"lines": len(lines), "error_lines": len(bad), "first_errors": bad[:5]}


def run_config(args: argparse.Namespace, trace: Sequence[Job]) -> dict[str, Any]:
    """The run's settings as a report's ``config`` opens: the trace and when a side counts as settled."""
    return {
        "jobs": args.jobs,
        "seed": args.seed,
        **trace_config(trace),
        "quiet_s": args.quiet,
        "deadline_s": args.deadline,
    }
