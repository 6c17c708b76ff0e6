"""The TrainingJob resource: a gang of workers placed together on well-connected GPUs."""

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, field_validator

from gputopo.api.base import ApiModel, NamespacedObject, StatusModel
from gputopo.api.conditions import Condition
from gputopo.api.preemption import NominationStatus, PreemptionStatus

__all__ = [
    "MAX_GPUS_PER_WORKER",
    "MAX_WORKERS",
    "FailurePolicy",
    "GpuRequirements",
    "InterNode",
    "IntraNode",
    "JobPhase",
    "LinkFailureAction",
    "PlacementStatus",
    "PreemptionTerms",
    "RunPolicy",
    "TopologyRequirements",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "WorkerPlacement",
]

MAX_WORKERS = 1024
MAX_GPUS_PER_WORKER = 16
MAX_TIER = 7


class IntraNode(StrEnum):
    """What must connect every pair of a worker's GPUs."""

    NVSWITCH = "nvswitch"
    NVLINK = "nvlink"
    ANY = "any"


class LinkFailureAction(StrEnum):
    RESCHEDULE = "Reschedule"
    TOLERATE = "Tolerate"


class JobPhase(StrEnum):
    PENDING = "Pending"
    PLACING = "Placing"
    RUNNING = "Running"
    RESCHEDULING = "Rescheduling"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class InterNode(ApiModel):
    """Network tiers for multi-node gangs: tier 0 is the switch closest to the nodes."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.preferredTier) || !has(self.requiredTier) "
                    "|| self.preferredTier <= self.requiredTier",
                    "message": "preferredTier must not be above requiredTier",
                    "fieldPath": ".preferredTier",
                }
            ]
        }
    }

    required_tier: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TIER,
        description=(
            "The whole gang must sit under one switch of this tier (0 = same leaf switch). A tier the "
            "cluster's network configuration lacks is refused (the job is marked Invalid), never widened."
        ),
    )
    preferred_tier: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TIER,
        description=(
            "Prefer placements under one switch of this tier when they exist; like requiredTier, a tier the "
            "cluster lacks is refused."
        ),
    )


class TopologyRequirements(ApiModel):
    intra_node: IntraNode = Field(
        default=IntraNode.ANY,
        description="nvswitch: every GPU pair through NVSwitch; nvlink: every pair by NVLink; any: no requirement.",
    )
    min_bus_bandwidth_g_bps: float = Field(
        default=0.0,
        ge=0,
        le=10000,
        alias="minBusBandwidthGBps",
        description="Lowest acceptable estimated all-reduce bus bandwidth (GB/s) of the whole gang.",
    )
    inter_node: InterNode = Field(default_factory=InterNode)
    slice_size: int | None = Field(
        default=None,
        ge=1,
        le=10000,
        description=(
            "On multi-node NVLink domains (GB200/GB300 NVL72 racks): ranks that must share one NVLink domain, "
            "e.g. a tensor-parallel group. A gang split over domains gives each domain a whole number of slices; "
            "workers must be a multiple of it."
        ),
    )


class GpuRequirements(ApiModel):
    model: str | None = Field(
        default=None,
        max_length=128,
        description="Only GPUs whose product name contains this text (e.g. H100).",
    )
    same_model: bool = Field(default=True, description="Every worker gets the same GPU model.")
    same_driver: bool = Field(default=False, description="Every worker's node runs the same driver version.")


class FailurePolicy(ApiModel):
    on_link_failure: LinkFailureAction = Field(
        default=LinkFailureAction.RESCHEDULE,
        description="Reschedule: re-place the gang; Tolerate: keep running while the bus bandwidth suffices.",
    )
    max_restarts: int = Field(default=3, ge=0, le=1000, description="Re-placements before the job fails.")
    backoff_seconds: int = Field(
        default=10, ge=0, le=3600, description="Wait before a re-placement; doubles with each restart."
    )
    grace_period_seconds: int = Field(
        default=30, ge=0, le=3600, description="Termination grace for workers to checkpoint on SIGTERM."
    )
    cooldown_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="At most one re-placement per cooldown window, so a flapping link cannot cause a storm.",
    )


class RunPolicy(ApiModel):
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the finished job after this many seconds."
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Fail the job when it has been active for longer than this."
    )


class PreemptionTerms(ApiModel):
    """Whether and when the job may be a victim of a higher-priority gang."""

    preemptible: bool = Field(
        default=True,
        description=(
            "Ignored: a job does not opt out of preemption itself. What keeps a gang from ever being a victim is its "
            "PriorityClass's annotation gputopo.io/preemptible: \"false\" (an admin's)."
        ),
    )
    min_runtime_seconds: int = Field(
        default=0,
        ge=0,
        le=31_536_000,
        description=(
            "Not preempted within this many seconds of its (re)start; at most the operator's "
            "preemption.maxMinRuntimeSeconds counts."
        ),
    )
    checkpoint_interval_seconds: int | None = Field(
        default=None,
        ge=1,
        le=31_536_000,
        description=(
            "How often the job saves what a restart resumes from, in seconds: one checkpoint this long after its "
            "(re)start or its gputopo.io/checkpoint-time annotation, and every interval after. Its next "
            "checkpoint is then known, and a preemptor whose PriorityClass allows it "
            "(gputopo.io/checkpoint-wait-seconds) may wait for it rather than have the job lose the work since "
            "the last one."
        ),
    )


class TrainingJobSpec(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.workers * self.gpusPerWorker <= 8192",
                    "message": "a gang may hold at most 8192 GPUs (workers x gpusPerWorker)",
                },
                {
                    "rule": "!has(self.topology) || !has(self.topology.intraNode) "
                    "|| self.topology.intraNode == 'any' || self.gpusPerWorker >= 2",
                    "message": "topology.intraNode nvlink or nvswitch needs gpusPerWorker of at least 2",
                    "fieldPath": ".topology.intraNode",
                },
                {
                    "rule": "!has(self.topology) || !has(self.topology.sliceSize) "
                    "|| self.workers % self.topology.sliceSize == 0",
                    "message": "topology.sliceSize must divide workers: every NVLink domain takes whole slices",
                    "fieldPath": ".topology.sliceSize",
                },
                {
                    "rule": "!has(self.priority) || !has(self.priorityClassName)",
                    "message": "set priorityClassName or the deprecated priority, not both",
                    "fieldPath": ".priority",
                },
            ]
        }
    }

    workers: int = Field(default=1, ge=1, le=MAX_WORKERS, description="Number of worker pods in the gang.")
    gpus_per_worker: int = Field(
        ge=1, le=MAX_GPUS_PER_WORKER, description="GPUs each worker pod requests (nvidia.com/gpu)."
    )
    template: dict[str, Any] = Field(
        description="Pod template of every worker (a PodTemplateSpec).",
        json_schema_extra={"x-gputopo-pod-template": True},
    )
    topology: TopologyRequirements = Field(default_factory=TopologyRequirements)
    gpu: GpuRequirements = Field(default_factory=GpuRequirements)
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "The PriorityClass whose value orders the queue (higher first) and whose preemptionPolicy says whether "
            "the job may preempt lower-priority gangs; its pods get it too. Without it the cluster's globalDefault "
            "class applies, else priority 0."
        ),
    )
    priority: int | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description=(
            "Deprecated: use priorityClassName. A value of its own, used when no class is named, and only to lower "
            "the job's priority below what the cluster grants a job naming no class (its globalDefault "
            "PriorityClass's, else 0): it needs no PriorityClass, so it never raises it."
        ),
    )
    preemption: PreemptionTerms = Field(default_factory=PreemptionTerms)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)

    @field_validator("template")
    @classmethod
    def _template_has_containers(cls, value: dict[str, Any]) -> dict[str, Any]:
        spec = value.get("spec")
        containers = spec.get("containers") if isinstance(spec, dict) else None
        if not isinstance(containers, list) or not containers:
            raise ValueError("template.spec.containers must list at least one container")
        for i, container in enumerate(containers):
            if not isinstance(container, dict) or not container.get("name"):
                raise ValueError(f"template.spec.containers[{i}].name is required")
        return value


class WorkerPlacement(StatusModel):
    rank: int = Field(ge=0)
    node: str
    gpus: list[int] = Field(default_factory=list)
    nics: list[str] = Field(default_factory=list)


class PlacementStatus(StatusModel):
    generation: int = Field(default=0, ge=0, description="Counts placements of this job.")
    estimated_bus_bandwidth_g_bps: float = Field(default=0.0, alias="estimatedBusBandwidthGBps")
    bottleneck: str = ""
    workers: list[WorkerPlacement] = Field(default_factory=list)


class TrainingJobStatus(StatusModel):
    phase: JobPhase = JobPhase.PENDING
    observed_generation: int | None = None
    placement: PlacementStatus | None = None
    restarts: int = 0
    conditions: list[Condition] = Field(default_factory=list)
    start_time: datetime | None = None
    completion_time: datetime | None = None
    last_restart_time: datetime | None = None
    nomination: NominationStatus | None = Field(
        default=None, description="GPUs held for the job while the gangs it preempts terminate."
    )
    preemption: PreemptionStatus | None = Field(default=None, description="How the job was preempted, if it was.")


class TrainingJob(NamespacedObject):
    """A whole TrainingJob object as read from the API server."""

    kind: ClassVar[str] = "TrainingJob"
    plural: ClassVar[str] = "trainingjobs"
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)
