"""Prometheus metrics of the operator, on a registry of its own (no process-wide globals)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from gputopo.api.trainingjob import JobPhase
from gputopo.control.reconcile import PassResult
from gputopo.controller.readiness import Readiness, with_readiness

__all__ = ["Metrics"]

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
        self.api_errors = Counter(
            "gputopo_api_errors_total",
            "API requests that failed, by operation.",
            ["operation"],
            registry=self.registry,
        )

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
