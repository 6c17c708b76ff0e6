"""From a changed cluster to a decision per job: which placements a fault hits, and what the policy says.

``faults_under`` finds the faults under one placement (only the job's own GPUs, the links between them,
its NICs when it spans nodes, and its nodes); ``decide`` applies the job's failurePolicy. Both are pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gputopo.api.nodetopology import FabricHealth, GpuHealthState, LinkState, NicState
from gputopo.api.trainingjob import FailurePolicy, LinkFailureAction, WorkerPlacement
from gputopo.control.bandwidth import GangEstimate
from gputopo.control.facts import NodeFacts, TopologyFacts
from gputopo.topology.fabric import fabric_health
from gputopo.topology.model import Topology

__all__ = [
    "Action",
    "Fault",
    "FaultKind",
    "Verdict",
    "backoff_delay",
    "decide",
    "faults_under",
]

MAX_BACKOFF_SECONDS = 3600.0


class FaultKind(StrEnum):
    """CamelCase, as they appear in condition reasons and Events."""

    LINK_DOWN = "LinkDown"
    LINK_DEGRADED = "LinkDegraded"
    NIC_DOWN = "NicDown"
    GPU_UNHEALTHY = "GpuUnhealthy"
    FABRIC_DEGRADED = "NvlinkFabricDegraded"  # a tray's NVLink fabric, or its rack's (a switch tray lost)
    FABRIC_DOWN = "NvlinkFabricDown"
    NODE_NOT_READY = "NodeNotReady"
    NODE_LOST = "NodeLost"

    @property
    def tolerable(self) -> bool:
        """Faults a running gang can outlive at lower bandwidth; a lost GPU or node ends it."""
        return self in (FaultKind.LINK_DOWN, FaultKind.LINK_DEGRADED, FaultKind.NIC_DOWN, FaultKind.FABRIC_DEGRADED)

    @property
    def node_gone(self) -> bool:
        """The kubelet will not run the pods' termination: delete them without grace."""
        return self in (FaultKind.NODE_NOT_READY, FaultKind.NODE_LOST)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    node: str
    detail: str

    def __str__(self) -> str:
        return f"{self.node}: {self.detail}"


def faults_under(
    workers: Sequence[WorkerPlacement],
    topologies: Mapping[str, TopologyFacts],
    nodes: Mapping[str, NodeFacts],
    now: datetime,
    not_ready_grace: float,
) -> tuple[list[Fault], datetime | None]:
    """The faults under a placement, and when a NotReady node still in its grace becomes one."""
    faults: list[Fault] = []
    recheck: datetime | None = None
    multi_node = len({w.node for w in workers}) > 1
    by_node: dict[str, tuple[set[int], set[str]]] = {}
    for worker in workers:
        gpus, nics = by_node.setdefault(worker.node, (set(), set()))
        gpus.update(worker.gpus)
        nics.update(worker.nics)
    for name in sorted(by_node):
        gpus, nics = by_node[name]
        node = nodes.get(name)
        if node is None:
            faults.append(Fault(FaultKind.NODE_LOST, name, "Node deleted"))
            continue
        if not node.ready:
            since = node.ready_since or now
            deadline = since + timedelta(seconds=not_ready_grace)
            if now >= deadline:
                faults.append(Fault(FaultKind.NODE_NOT_READY, name, f"NotReady since {since:%H:%M:%S}"))
                continue
            recheck = deadline if recheck is None else min(recheck, deadline)
        facts = topologies.get(name)
        if facts is None or facts.topology is None:
            continue  # nothing known about its parts: judge it by the Node alone
        topology = facts.topology
        for gpu in topology.gpus:
            if gpu.index in gpus and gpu.health is GpuHealthState.UNHEALTHY:
                why = f" ({gpu.health_reason})" if gpu.health_reason else ""
                faults.append(Fault(FaultKind.GPU_UNHEALTHY, name, f"GPU{gpu.index} Unhealthy{why}"))
        fabric = _fabric_fault(topology, gpus, name)
        if fabric is not None:
            faults.append(fabric)
        for (a, b), link in sorted(topology.links.items()):
            if a in gpus and b in gpus and link.state is not LinkState.UP:
                kind = FaultKind.LINK_DOWN if link.state is LinkState.DOWN else FaultKind.LINK_DEGRADED
                faults.append(Fault(kind, name, f"GPU{a}-GPU{b} {link.kind} {link.state}"))
        if multi_node:
            for nic in topology.nics:
                if nic.name in nics and nic.state is NicState.DOWN:
                    faults.append(Fault(FaultKind.NIC_DOWN, name, f"NIC {nic.name} Down"))
    return faults, recheck


def _fabric_fault(topology: Topology, gpus: set[int], node: str) -> Fault | None:
    """One fault per node whose job GPUs' NVLink fabric is not healthy: on a GB200 tray every NVLink byte, even
    between the tray's own GPUs, crosses the rack's switch trays. A fabric manager that goes down takes every
    tray of its domain with it, so each gang of the domain sees this on its own trays."""
    worst: tuple[FabricHealth, str, int] | None = None
    for gpu in topology.gpus:
        if gpu.index not in gpus:
            continue
        health, reason = fabric_health(gpu.fabric)
        if health is FabricHealth.HEALTHY:
            continue
        if worst is None or (health is FabricHealth.DOWN and worst[0] is not FabricHealth.DOWN):
            worst = (health, reason, gpu.index)
    if worst is None:
        return None
    kind = FaultKind.FABRIC_DOWN if worst[0] is FabricHealth.DOWN else FaultKind.FABRIC_DEGRADED
    return Fault(kind, node, f"GPU{worst[2]}: {worst[1]}")


class Action(StrEnum):
    NONE = "None"
    TOLERATE = "Tolerate"
    WAIT = "Wait"  # damped: inside the cooldown window of the last re-placement
    RESCHEDULE = "Reschedule"
    FAIL = "Fail"


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reason: str = ""
    message: str = ""
    estimate: GangEstimate | None = None
    not_before: datetime | None = None
    grace_seconds: int = 0

    @classmethod
    def none(cls) -> Verdict:
        return cls(Action.NONE)


def backoff_delay(policy: FailurePolicy, restarts: int) -> float:
    """The wait before the ``restarts``-th re-placement: backoffSeconds, doubling from the second on."""
    if restarts <= 0 or policy.backoff_seconds <= 0:
        return 0.0
    return float(min(MAX_BACKOFF_SECONDS, policy.backoff_seconds * 2 ** (restarts - 1)))


def decide(
    faults: Sequence[Fault],
    policy: FailurePolicy,
    min_busbw_gbps: float,
    restarts: int,
    last_restart: datetime | None,
    now: datetime,
    estimate: Callable[[], GangEstimate | None],
) -> Verdict:
    """What the job's failurePolicy says about these faults (``estimate`` is asked only for Tolerate)."""
    if not faults:
        return Verdict.none()
    first = faults[0]
    summary = "; ".join(str(f) for f in faults[:4]) + (f" (+{len(faults) - 4} more)" if len(faults) > 4 else "")
    if policy.on_link_failure is LinkFailureAction.TOLERATE and all(f.kind.tolerable for f in faults):
        degraded = estimate()
        if degraded is not None and degraded.busbw_gbps >= min_busbw_gbps:
            return Verdict(
                Action.TOLERATE,
                reason=first.kind.value,
                message=f"{summary}; estimated bus bandwidth now {degraded.busbw_gbps:.1f} GB/s "
                f"(minimum {min_busbw_gbps:g})",
                estimate=degraded,
            )
        if degraded is not None:
            summary += f"; estimate {degraded.busbw_gbps:.1f} GB/s is below the minimum {min_busbw_gbps:g}"
    if restarts >= policy.max_restarts:
        return Verdict(
            Action.FAIL,
            reason="RestartsExhausted",
            message=f"{summary}; maxRestarts {policy.max_restarts} reached",
        )
    if last_restart is not None and policy.cooldown_seconds > 0:
        until = last_restart + timedelta(seconds=policy.cooldown_seconds)
        if now < until:
            return Verdict(
                Action.WAIT,
                reason="FailoverDamped",
                message=f"{summary}; last re-placement {(now - last_restart).total_seconds():.1f}s ago, "
                f"cooldown {policy.cooldown_seconds}s",
                not_before=until,
            )
    grace = 0 if any(f.kind.node_gone for f in faults) else policy.grace_period_seconds
    return Verdict(Action.RESCHEDULE, reason=first.kind.value, message=summary, grace_seconds=grace)
