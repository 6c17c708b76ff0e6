"""Stamps of what arrives on a namespace's watches: when each pod was first seen created, bound and Running
(and on which node), and, for ``bench_allocation.py``, when each TrainingJob was first seen and first seen with a
plan, and when each TrainingJob's Kueue Workload was first seen admitted.

The stamps are ``time.monotonic()`` at arrival; the API server's own whole-second times (a pod's
``PodScheduled`` ``lastTransitionTime``, a TrainingJob's ``creationTimestamp``) are kept beside them to check
the watch's lag.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from watching import Watcher

__all__ = ["JobStamps", "PodStamps", "Stamper", "api_time"]


def api_time(text: Any) -> float | None:
    """An API timestamp (RFC 3339, whole seconds) as epoch seconds."""
    if isinstance(text, datetime):
        return text.timestamp()
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


@dataclass
class PodStamps:
    created: float
    bound: float | None = None
    running: float | None = None
    node: str = ""
    scheduled_api: float | None = None  # PodScheduled lastTransitionTime, epoch s


@dataclass
class JobStamps:
    created: float
    created_api: float | None = None  # creationTimestamp, epoch s
    planned: float | None = None
    plans: dict[int, dict[int, tuple[str, list[int]]]] = field(default_factory=dict)  # generation -> rank -> plan


@dataclass
class Stamper:
    """Watches the pods and (optionally) the TrainingJobs of one namespace; stamps each stage once."""

    core: Any
    custom: Any
    namespace: str
    selector: str
    jobs_too: bool
    workloads_too: bool = False
    pods: dict[str, PodStamps] = field(default_factory=dict)
    jobs: dict[str, JobStamps] = field(default_factory=dict)
    workloads: dict[str, float] = field(default_factory=dict)  # TrainingJob -> its Workload first seen
    admitted: dict[str, float] = field(default_factory=dict)  # TrainingJob -> its Workload first seen admitted
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watchers: list[Watcher] = field(default_factory=list)

    def start(self) -> Stamper:
        self._watchers.append(
            Watcher(
                self.core.list_namespaced_pod,
                (self.namespace,),
                {"label_selector": self.selector},
                self._pod,
                name="pod-stamps",
                raw=True,
            ).start()
        )
        if self.jobs_too:
            args = ("gputopo.io", "v1alpha1", self.namespace, "trainingjobs")
            call = self.custom.list_namespaced_custom_object
            self._watchers.append(Watcher(call, args, {}, self._job, name="job-stamps").start())
        if self.workloads_too:
            args = ("kueue.x-k8s.io", "v1beta2", self.namespace, "workloads")
            call = self.custom.list_namespaced_custom_object
            self._watchers.append(Watcher(call, args, {}, self._workload, name="workload-stamps").start())
        return self

    def stop(self) -> None:
        for watcher in self._watchers:
            watcher.stop()

    def running(self) -> int:
        with self._lock:
            return sum(1 for p in self.pods.values() if p.running is not None)

    def snapshot(self) -> tuple[dict[str, PodStamps], dict[str, JobStamps]]:
        with self._lock:
            return dict(self.pods), dict(self.jobs)

    def admissions(self) -> tuple[dict[str, float], dict[str, float]]:
        """TrainingJob -> when its Workload was first seen, and when first seen admitted."""
        with self._lock:
            return dict(self.workloads), dict(self.admitted)

    def running_on(self) -> tuple[dict[str, float], dict[str, str]]:
        """pod -> when it was first seen Running, and pod -> its node, of the pods Running."""
        with self._lock:
            up = {name: p for name, p in self.pods.items() if p.running is not None}
        return {name: p.running for name, p in up.items() if p.running is not None}, {n: p.node for n, p in up.items()}

    def _pod(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            return
        node = spec.get("nodeName")
        with self._lock:
            stamps = self.pods.setdefault(meta["name"], PodStamps(now))
            if stamps.bound is None and node:
                stamps.bound, stamps.node = now, node
            if stamps.scheduled_api is None:
                for cond in status.get("conditions") or []:
                    if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                        stamps.scheduled_api = api_time(cond.get("lastTransitionTime"))
            if stamps.running is None and node and status.get("phase") == "Running":
                stamps.running = now

    def _workload(self, workload: dict[str, Any], now: float) -> None:
        meta = workload.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        admitted = bool((workload.get("status") or {}).get("admission"))
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "TrainingJob":
                with self._lock:
                    self.workloads.setdefault(owner["name"], now)
                    if admitted:
                        self.admitted.setdefault(owner["name"], now)

    def _job(self, job: dict[str, Any], now: float) -> None:
        meta = job.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        placement = (job.get("status") or {}).get("placement") or {}
        with self._lock:
            stamps = self.jobs.setdefault(meta["name"], JobStamps(now, api_time(meta.get("creationTimestamp"))))
            workers = placement.get("workers") or []
            generation = int(placement.get("generation") or 0)
            if workers and generation not in stamps.plans:
                stamps.plans[generation] = {int(w["rank"]): (w["node"], sorted(w["gpus"])) for w in workers}
                if stamps.planned is None:
                    stamps.planned = now
