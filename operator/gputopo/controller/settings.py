"""Operator settings from the environment (``GPUTOPO_*``), which the chart fills from its ConfigMap.

Lists are comma-separated (``GPUTOPO_NAMESPACES=team-a,team-b``) or JSON. Every timeout is in seconds.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gputopo.control.dra import GpuAllocation
from gputopo.control.kueue_quota import QueueNameRule
from gputopo.control.preemptions import PreemptionSettings
from gputopo.placement.types import DEFAULT_DOMAIN_NODE_CAP, TierConfig, TierLevel

__all__ = ["OperatorSettings"]

CommaList = Annotated[list[str], NoDecode]
FloatList = Annotated[list[float], NoDecode]


def _split(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUTOPO_", extra="ignore", frozen=True)

    # -- what to watch ------------------------------------------------------------------------------------
    namespaces: CommaList = Field(
        default_factory=list, description="Namespaces whose TrainingJobs to reconcile; empty: all."
    )
    operator_namespace: str = Field(default="default", description="Where the operator's ConfigMap lives.")
    config_map: str = Field(
        default="gputopo-operator", description="The operator's ConfigMap; its daemon runs the control loop."
    )

    # -- the network --------------------------------------------------------------------------------------
    tier_labels: CommaList = Field(
        default_factory=lambda: ["fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"],
        description="Node labels naming a node's switch at each network tier, lowest first.",
    )
    tier_oversubscription: FloatList = Field(
        default_factory=lambda: [1.0, 2.0], description="Oversubscription of each tier, same order."
    )

    # -- GPUs ---------------------------------------------------------------------------------------------------
    gpu_allocation: GpuAllocation = Field(
        default=GpuAllocation.DEVICE_PLUGIN,
        description="Who gives a rank its GPUs: devicePlugin (an nvidia.com/gpu limit; the kubelet's device plugin "
        "picks) or dra (a ResourceClaim per rank naming the planned GPUs of NVIDIA's DRA driver).",
    )

    # -- timeouts -----------------------------------------------------------------------------------------
    nvlink_domain_node_cap: int = Field(
        default=DEFAULT_DOMAIN_NODE_CAP,
        ge=1,
        le=1000,
        description="Nodes of one multi-node NVLink domain (an NVL72 rack's trays) in use at once; the rest are "
        "spares for failures.",
    )
    unschedulable_timeout_seconds: float = Field(
        default=120.0, gt=0, description="A gated-off pod still unschedulable after this re-plans its job."
    )
    node_not_ready_grace_seconds: float = Field(
        default=40.0, ge=0, description="A Node NotReady for longer than this fails the gangs on it."
    )
    gang_arrival_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A foreign gang's plan whose pods have not all been created this long after it was made is let "
        "go (JobSet, LeaderWorkerSet and MPI launchers create later pods only once the first is placed).",
    )
    gang_planning_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds one foreign gang's plan may take in a pass (checked between the engine's calls; the "
        "pass runs on the event loop): past it the gang is Unplaceable, saying so, and tried again the next pass.",
    )
    gang_phantom_headroom_ranks: int = Field(
        default=0,
        ge=0,
        le=8192,
        description="A gang of bare pods (pods labelled gputopo.io/gang, a Kueue pod group) declares its own size; "
        "it is planned only when its ranks with no pod yet fit what its namespace's ResourceQuotas still allow of "
        "requests.nvidia.com/gpu, or, in a namespace with no quota on GPUs, when at most this many of its ranks have "
        "no pod yet (0: every rank's pod must exist).",
    )
    gang_record_retention_seconds: float = Field(
        default=600.0,
        ge=0,
        description="The GangPlacement of a gang with no owner (bare pods: a Kueue pod group, pods labelled "
        "gputopo.io/gang) is deleted this long after no pod of the gang is left; an owned gang's goes with its owner.",
    )
    gangs: bool = Field(
        default=True,
        description="Place the gangs gputopo does not own (pods gated by gputopo.io/placement: PodGroups, Jobs, "
        "JobSets, LeaderWorkerSets, PyTorchJobs, Kueue pod groups, pods labelled gputopo.io/gang).",
    )
    preemption: bool = Field(
        default=True,
        description="Preempt whole lower-priority gangs, chosen by topology, for a gang whose PriorityClass allows "
        "it (preemptionPolicy PreemptLowerPriority) and that cannot be placed otherwise.",
    )
    preemption_protection_seconds: float = Field(
        default=300.0,
        ge=0,
        description="A gang preempted is not preempted again this long after, and preempts nobody in turn meanwhile.",
    )
    preemption_max_victims_per_pass: int = Field(
        default=16, ge=1, le=1000, description="Gangs one control pass may preempt in all."
    )
    preemption_max_victims_per_gang: int = Field(
        default=64,
        ge=1,
        le=1000,
        description="Gangs one preemptor may end; more than what is left of the pass's budget only as the "
        "pass's first preemptor (so a wide gang needing many small victims is not starved by the pass's bound).",
    )
    preemption_max_min_runtime_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="The longest minimum runtime a workload may claim for itself (spec.preemption.minRuntimeSeconds, "
        "gputopo.io/min-runtime-seconds): a longer one counts as this.",
    )
    preemption_classes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Which PriorityClasses may preempt, in which namespaces (JSON: class name to namespaces, '*' for "
        "every one); empty: every class whose preemptionPolicy allows it, everywhere.",
    )
    kueue_manage_jobs_without_queue_name: bool = Field(
        default=False,
        description="A TrainingJob without the label kueue.x-k8s.io/queue-name is not placed (Kueue's own setting of "
        "the name, for Jobs); in kueue_managed_jobs_namespaces only, when set.",
    )
    kueue_managed_jobs_namespaces: CommaList = Field(
        default_factory=list,
        description="Namespaces where kueue_manage_jobs_without_queue_name holds; empty: every namespace.",
    )
    quarantine_seconds: float = Field(
        default=60.0, ge=0, description="A link, NIC or GPU seen failing is avoided by new plans this long."
    )
    starvation_seconds: float = Field(
        default=300.0, gt=0, description="After the queue head waited this long, lower priorities stop backfilling."
    )
    resync_seconds: float = Field(default=2.0, gt=0, description="Control-loop period without events.")
    settle_seconds: float = Field(
        default=0.1, ge=0, description="Events arriving this close together are handled in one pass."
    )
    api_concurrency: int = Field(default=64, ge=1, le=256, description="API requests in flight at once.")
    placements_per_pass: int = Field(
        default=64,
        ge=1,
        description="Jobs one control pass places before it applies them; the rest of the queue is placed by "
        "the next pass, right after (a long queue's first gangs start while the rest are planned).",
    )
    pass_planning_seconds: float = Field(
        default=0.25,
        gt=0,
        description="How long one control pass plans before it applies what it placed and lets the watches and "
        "writers run; the rest of the queue is planned by the next pass, right after (a pass runs on the "
        "operator's event loop).",
    )
    list_chunk_size: int = Field(
        default=100,
        ge=1,
        description="Objects per page of a list, kopf's and the node watches' (bounds a listing's memory).",
    )
    object_idle_seconds: float = Field(
        default=0.5, gt=0, description="kopf's per-object worker exits after this long without events."
    )

    # -- peering, probes, observability --------------------------------------------------------------------
    peering_name: str = Field(default="gputopo", description="KopfPeering / ClusterKopfPeering object name.")
    standalone: bool = Field(default=False, description="Run without peering (single replica, tests).")
    priority: int | None = Field(default=None, description="Peering priority; random when unset.")
    identity: str | None = Field(default=None, description="Peering identity; set it to the pod name.")
    peering_lifetime_seconds: int = Field(default=30, ge=5, description="When a silent peer counts as dead.")
    leader_settle_seconds: float = Field(
        default=3.0,
        ge=0,
        description="A replica that finds itself leading waits this long before it acts: replicas started "
        "together each lead until they have seen the other's peering record.",
    )
    metrics_port: int = Field(default=9090, ge=0, le=65535, description="Prometheus /metrics; 0 disables.")
    liveness_port: int = Field(default=8080, ge=0, le=65535, description="kopf liveness /healthz; 0 disables.")
    readiness_failed_passes: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Control passes that fail in a row before /readyz (beside /metrics) says not ready; the next "
        "pass that completes makes it ready again.",
    )
    log_format: str = Field(default="json", pattern="^(json|plain|full)$")

    @field_validator(
        "namespaces", "tier_labels", "tier_oversubscription", "kueue_managed_jobs_namespaces", mode="before"
    )
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split(value)

    @model_validator(mode="after")
    def _tiers_match(self) -> OperatorSettings:
        if len(self.tier_oversubscription) not in (0, len(self.tier_labels)):
            raise ValueError("tier_oversubscription needs one value per tier label")
        if any(x < 1.0 for x in self.tier_oversubscription):
            raise ValueError("oversubscription is at least 1.0")
        return self

    @field_validator("preemption_classes", mode="after")
    @classmethod
    def _classes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, namespaces in value.items():
            if not name or not namespaces or not all(isinstance(n, str) and n for n in namespaces):
                raise ValueError(f"preemption_classes: class {name!r} needs a list of namespace names (or '*')")
        return value

    @property
    def preemption_settings(self) -> PreemptionSettings | None:
        """What the control pass preempts by; None when preemption is off."""
        if not self.preemption:
            return None
        return PreemptionSettings(
            True,
            self.preemption_protection_seconds,
            self.preemption_max_victims_per_pass,
            max_victims_per_gang=self.preemption_max_victims_per_gang,
            max_min_runtime_seconds=self.preemption_max_min_runtime_seconds,
            preemptors={name: frozenset(ns) for name, ns in self.preemption_classes.items()},
        )

    @property
    def queue_names(self) -> QueueNameRule:
        """Whether a TrainingJob must name a Kueue LocalQueue (Kueue's manageJobsWithoutQueueName, per namespace)."""
        return QueueNameRule(self.kueue_manage_jobs_without_queue_name, frozenset(self.kueue_managed_jobs_namespaces))

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def watched_namespaces(self) -> list[str]:
        """The job namespaces plus the operator's own (its ConfigMap carries the control loop)."""
        if self.clusterwide:
            return []
        return sorted({*self.namespaces, self.operator_namespace})

    def watches(self, namespace: str) -> bool:
        return self.clusterwide or namespace in self.namespaces

    @property
    def tiers(self) -> TierConfig:
        over = self.tier_oversubscription or [1.0] * len(self.tier_labels)
        levels = tuple(TierLevel(label, x) for label, x in zip(self.tier_labels, over, strict=True))
        return TierConfig(levels, domain_node_cap=self.nvlink_domain_node_cap)
