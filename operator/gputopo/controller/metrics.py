"""Prometheus metrics of the operator, on a registry of its own (no process-wide globals)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from gputopo.api.trainingjob import JobPhase
from gputopo.control.explain.reasons import PendingReason
from gputopo.control.reconcile import PassResult
from gputopo.controller.readiness import Readiness, with_readiness
from gputopo.gangs.model import GATE

__all__ = ["Metrics", "oldest_gated_age"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # every scrape and probe is not news
        pass


class Metrics:
    """The metrics, and the readiness ``/readyz`` answers beside ``/metrics`` (``gputopo.controller.readiness``)."""

    def __init__(self, registry: CollectorRegistry | None = None, readiness: Readiness | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.readiness = readiness or Readiness()
        self.pass_failures = Counter(
            "gputopo_control_pass_failures_total",
            "Control passes that failed (an error no single job or gang could be held to; the log has its "
            "traceback). The operator is not ready (/readyz) after GPUTOPO_READINESS_FAILED_PASSES in a row.",
            registry=self.registry,
        )
        self.failed_in_a_row = Gauge(
            "gputopo_control_passes_failed_in_a_row",
            "Control passes that failed since the last one that completed.",
            registry=self.registry,
        )
        self.placement_seconds = Histogram(
            "gputopo_placement_decision_seconds",
            "Time the placement engine took for one job's decision.",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "gputopo_control_pass_seconds",
            "Time one control-loop pass took to decide; the writes it starts go out beside the next passes.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gang_slot_wait = Histogram(
            "gputopo_gang_slot_wait_seconds",
            "Time a newly placed gang's writes waited for an API slot (the API concurrency, shared by the gangs "
            "in the order they were placed) after its plan was decided.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_length = Gauge(
            "gputopo_queue_length", "TrainingJobs waiting for a placement.", registry=self.registry
        )
        self.jobs = Gauge("gputopo_jobs", "TrainingJobs by phase.", ["phase"], registry=self.registry)
        self.writing = Gauge(
            "gputopo_jobs_writing",
            "TrainingJobs whose writes are going out (or waiting for an API slot), by what the writes are.",
            ["kind"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "gputopo_restarts_total", "Gang re-placements, by reason.", ["reason"], registry=self.registry
        )
        self.preemptions = Counter(
            "gputopo_preemptions",
            "Gangs preempted for a higher-priority gang, by the victim's source (trainingjob, podgroup, job, ...).",
            ["source"],
            registry=self.registry,
        )
        self.victim_gpu_hours = Counter(
            "gputopo_preemption_victim_gpu_hours",
            "GPU-hours of work the preempted gangs lost (since their last checkpoint, declared or by their declared "
            "interval, or their start).",
            ["source"],
            registry=self.registry,
        )
        self.waiting_for_checkpoint = Gauge(
            "gputopo_preemptors_waiting_for_checkpoint",
            "Gangs that would preempt now but wait for their victims' next checkpoint (their PriorityClass's "
            "gputopo.io/checkpoint-wait-seconds), as of the last pass.",
            registry=self.registry,
        )
        self.pending_gangs = Gauge(
            "gputopo_pending_gangs",
            "TrainingJobs and gangs that wait to be placed, by reason (Kueue's words where the meaning is the same: "
            "TopologyPlacementFailed, WaitingForQuota, Misconfigured, WaitingForPreemptedWorkloads, ...), as read "
            "before the last pass.",
            ["reason"],
            registry=self.registry,
        )
        self.api_errors = Counter(
            "gputopo_api_errors_total",
            "API requests that failed, by operation.",
            ["operation"],
            registry=self.registry,
        )

        self.oldest_gated_pod = Gauge(
            "gputopo_oldest_gated_pod_age_seconds",
            "Age of the oldest pod held by gputopo's scheduling gate (gputopo.io/placement), as the leading "
            "replica's watch sees it at the scrape; 0 when none. A gate the operator never lifts strands its pod: "
            "alert when this grows (docs/security.md), and lift the gates with `gputopo ungate`.",
            registry=self.registry,
        )

    def watch_gated(
        self, pods: Callable[[], Iterable[Mapping[str, Any]]] | None, clock: Callable[[], float] = time.time
    ) -> None:
        """Read the oldest gated pod's age from ``pods`` at each scrape (None: stop, 0 from now on)."""
        if pods is None:
            self.oldest_gated_pod.set_function(lambda: 0.0)
            return
        source = pods
        self.oldest_gated_pod.set_function(lambda: oldest_gated_age(source(), clock()))

    def observe_result(self, result: PassResult, seconds: float, placing: int, writing: int, held: int) -> None:
        """A pass that took ``seconds``, with ``writing`` jobs' writes going out (``placing`` of them gangs') and
        ``held`` jobs' reports held back."""
        placed = {r.job for r in result.reservations}
        for outcome in result.outcomes:
            kind = "placed" if outcome.queued.key in placed else "unplaceable"
            self.placement_seconds.labels(result=kind).observe(outcome.seconds)
        self.observe_pass(seconds, result.phases, result.queue_length, result.restarts)
        self.writing.labels(kind="placement").set(placing)
        self.writing.labels(kind="other").set(writing - placing)
        self.writing.labels(kind="report held").set(held)
        self.waiting_for_checkpoint.set(result.waiting_for_checkpoint)
        for ended in result.preempted:
            self.preemptions.labels(source=ended.source).inc()
            self.victim_gpu_hours.labels(source=ended.source).inc(ended.gpu_hours_lost)

    def observe_pass(self, seconds: float, phases: Mapping[str, int], queue_length: int, restarts: list[str]) -> None:
        self.pass_seconds.observe(seconds)
        self.queue_length.set(queue_length)
        for phase in JobPhase:
            self.jobs.labels(phase=phase.value).set(phases.get(phase.value, 0))
        for reason in restarts:
            self.restarts.labels(reason=reason).inc()

    def observe_pending(self, counts: Mapping[str, int]) -> None:
        for reason in PendingReason:
            self.pending_gangs.labels(reason=reason.value).set(counts.get(reason.value, 0))

    def pass_failed(self, why: str) -> None:
        self.pass_failures.inc()
        self.readiness.failed(why)
        self.failed_in_a_row.set(self.readiness.failed_in_a_row)

    def pass_completed(self) -> None:
        self.readiness.passed()
        self.failed_in_a_row.set(0)

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` and ``/readyz`` on ``port`` (0: neither), from a thread of their own."""
        if not port:
            return
        app = with_readiness(make_wsgi_app(self.registry), self.readiness)
        server = make_server("0.0.0.0", port, app, ThreadingWSGIServer, handler_class=_Quiet)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


def _created(pod: Mapping[str, Any]) -> float | None:
    meta = pod.get("metadata")
    stamp = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _gated(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return isinstance(gates, list) and any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def oldest_gated_age(pods: Iterable[Mapping[str, Any]], now: float) -> float:
    """Seconds since the oldest pod held by gputopo's gate was created (0: none). Read from another thread (the
    scrape) while the watch changes the pods: a pod gone meanwhile, or a store changed under the iteration,
    ends the reading with what was seen so far rather than failing the scrape."""
    oldest: float | None = None
    try:
        for pod in pods:
            created = _created(pod) if _gated(pod) else None
            if created is not None and (oldest is None or created < oldest):
                oldest = created
    except (KeyError, RuntimeError):
        pass
    return max(0.0, now - oldest) if oldest is not None else 0.0
