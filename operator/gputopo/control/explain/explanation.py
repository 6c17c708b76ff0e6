"""``explain``: why a gang waits (its reasons ranked, each domain's shortfall, what preemption would do), or,
for a running gang, where it sits, its estimated bus bandwidth and bottleneck, the health under it and its
restarts. A pure function of the listed cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gputopo.api.conditions import INVALID, PLACED
from gputopo.control.explain.cluster import LiveCluster, job_plan
from gputopo.control.explain.health import node_faults
from gputopo.control.explain.preemption import job_preemption
from gputopo.control.explain.reasons import PendingReason, gang_reason, job_reason, rank_of
from gputopo.control.explain.shortfall import domain_shortfalls
from gputopo.control.facts import JobFacts
from gputopo.control.gangrecords import GangRecord
from gputopo.control.queue import NEVER_FITS
from gputopo.placement import Placement, Request, place
from gputopo.placement.template import TemplateError

__all__ = ["Explanation", "Reason", "explain_gang", "explain_job"]


@dataclass(frozen=True, slots=True)
class Reason:
    reason: PendingReason
    message: str

    def to_data(self) -> dict[str, Any]:
        return {"reason": str(self.reason), "rank": rank_of(self.reason), "message": self.message}


@dataclass(slots=True)
class Explanation:
    kind: str  # TrainingJob | GangPlacement
    namespace: str
    name: str
    phase: str
    pending: bool
    reasons: list[Reason] = field(default_factory=list)
    shortfall: list[dict[str, Any]] = field(default_factory=list)
    preemption: dict[str, Any] | None = None
    placement: dict[str, Any] | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    last_restart: str = ""

    def to_data(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "pending": self.pending,
            "reasons": [r.to_data() for r in self.reasons],
            "shortfall": self.shortfall,
            "preemption": self.preemption,
            "placement": self.placement,
            "faults": self.faults,
            "restarts": self.restarts,
            "lastRestart": self.last_restart,
        }

    def lines(self) -> list[str]:
        out = [f"{self.kind} {self.namespace}/{self.name}: {self.phase}"]
        if self.pending:
            out.append("Pending because (first to fix first):")
            out += [f"  {i}. {r.reason}: {r.message}" for i, r in enumerate(self.reasons, 1)]
            if self.shortfall:
                out.append("Closest domains:")
                out += [f"  {s['words']}" for s in self.shortfall]
            if self.preemption is not None:
                out.append(f"Preemption: {self.preemption['words']}")
                out += [f"  - {v}" for v in self.preemption.get("victimWords", [])]
        if self.placement is not None:
            p = self.placement
            where = f"tier-{p['tier']} switch {p['tierDomain']}" if p.get("tierDomain") else "its nodes"
            out.append(
                f"Placed under {where}: estimated bus bandwidth {p['busBandwidthGBps']:.1f} GB/s, "
                f"bottleneck {p['bottleneck'] or 'none named'}"
            )
            out += [
                f"  rank {w['rank']:>3}  {w['node']:<24} GPUs {','.join(map(str, w['gpus']))}" for w in p["workers"]
            ]
            health = "; ".join(f"{f['node']} {f['part']} {f['state']}" for f in self.faults) or "all healthy"
            out.append(f"Links, NICs and GPUs under it: {health}")
        if self.restarts or self.last_restart:
            out.append(f"Restarts: {self.restarts}" + (f" (last: {self.last_restart})" if self.last_restart else ""))
        return out


def _gist(message: str) -> str:
    """A reason's words without its counts, and without the queue's "cannot fit even the empty cluster" lead, which
    the engine's words on the cluster as listed now do not carry."""
    return message.removeprefix(f"{NEVER_FITS}: ").split(";")[0]


def _sorted(reasons: list[Reason]) -> list[Reason]:
    """Ranked, first to fix first; two words of one reason (the operator's, and the engine's on the cluster as
    listed now) are one reason, the operator's first."""
    merged: dict[PendingReason, Reason] = {}
    for r in reasons:
        before = merged.get(r.reason)
        if before is None:
            merged[r.reason] = r
        elif _gist(r.message) != _gist(before.message):  # not the same words with other counts
            merged[r.reason] = Reason(r.reason, f"{before.message}; now: {r.message}")
    return sorted(merged.values(), key=lambda r: rank_of(r.reason))


def _where(
    cluster: LiveCluster, workers: list[tuple[int, str, tuple[int, ...], tuple[str, ...]]]
) -> list[dict[str, Any]]:
    faults = []
    for _, node, gpus, nics in workers:
        if node in cluster.snapshot:
            faults += [f.to_data() for f in node_faults(cluster.snapshot.node(node), set(gpus), nics)]
        else:
            faults.append({"node": node, "part": "node", "state": "Gone"})
    return faults


def _refusal(cluster: LiveCluster, request: Request) -> list[Reason]:
    result = place(cluster.snapshot, request)
    if isinstance(result, Placement):
        return []
    detail = f" ({'; '.join(result.details)})" if result.details else ""
    return [Reason(PendingReason.TOPOLOGY_PLACEMENT_FAILED, f"{result.reason}{detail}")]


def explain_job(cluster: LiveCluster, job: JobFacts) -> Explanation:
    status = job.status
    phase = str(status.phase.value)
    placed = next((c for c in status.conditions if c.type == PLACED), None)
    out = Explanation("TrainingJob", job.namespace, job.name, phase, pending=job_plan(job) is None)
    out.restarts = status.restarts
    if job.spec is None:
        out.reasons = [Reason(PendingReason.MISCONFIGURED, job.spec_error or "the spec does not parse")]
        return out
    if out.pending and phase not in ("Succeeded", "Failed"):
        reasons: list[Reason] = []
        said = job_reason(placed.reason) if placed is not None else None
        if said is not None and placed is not None:
            invalid = next((c for c in status.conditions if c.type == INVALID and c.status == "True"), None)
            # An invalid job's Placed message only says to fix the spec; its Invalid condition names the field.
            told = invalid.message if invalid is not None and invalid.message else placed.message
            reasons.append(Reason(said, told or placed.reason))
        elif placed is None:
            reasons.append(Reason(PendingReason.TOPOLOGY_PLACEMENT_FAILED, "the operator has not answered yet"))
        if said not in (PendingReason.MISCONFIGURED, PendingReason.WAITING_FOR_QUOTA):
            try:
                request = Request.from_spec(job.spec, name=job.name)
            except TemplateError as error:
                reasons.append(Reason(PendingReason.MISCONFIGURED, f"spec.{error}"))
            else:
                reasons += _refusal(cluster, request)
                out.shortfall = [s.to_data(request) for s in domain_shortfalls(cluster.snapshot, request)]
                out.preemption = job_preemption(cluster, job, request)
        out.reasons = _sorted(reasons)
        return out
    out.pending = False
    placement = status.placement
    if placement is not None and placement.workers:
        workers = [(w.rank, w.node, tuple(w.gpus), tuple(w.nics)) for w in placement.workers]
        out.placement = {
            "busBandwidthGBps": placement.estimated_bus_bandwidth_g_bps,
            "bottleneck": placement.bottleneck,
            "tier": None,
            "tierDomain": None,
            "workers": [{"rank": r, "node": n, "gpus": list(g), "nics": list(c)} for r, n, g, c in workers],
        }
        out.faults = _where(cluster, workers)
    degraded = [c for c in status.conditions if c.type == "Degraded" and c.status == "True"]
    out.last_restart = degraded[0].message if degraded else ""
    return out


def explain_gang(cluster: LiveCluster, gang: GangRecord) -> Explanation:
    said = gang_reason(gang.phase, gang.message)
    waits = said not in (None, PendingReason.WAITING_FOR_PODS, PendingReason.PLACED_BY_KUEUE)
    out = Explanation("GangPlacement", gang.key[0], gang.name, gang.phase, pending=waits)
    out.restarts, out.last_restart = gang.restarts, gang.last_restart_reason
    if said is not None:
        message = gang.message or gang.phase
        if gang.missing:
            message += f" (ranks {', '.join(map(str, gang.missing[:16]))} have no pod yet)"
        out.reasons = [Reason(said, message)]
    if gang.ranks and gang.phase not in ("Released", "Preempted"):
        workers = [(r.rank, r.node, r.gpus, r.nics) for r in gang.ranks]
        out.placement = {
            "busBandwidthGBps": gang.busbw_gbps,
            "bottleneck": gang.bottleneck,
            "tier": gang.tier,
            "tierDomain": None,
            "workers": [{"rank": r, "node": n, "gpus": list(g), "nics": list(c)} for r, n, g, c in workers],
        }
        out.faults = _where(cluster, workers)
    return out
