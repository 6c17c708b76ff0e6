"""The cluster snapshot and trace files of ``gputopo plan`` and ``gputopo simulate``: one schema for both the
loader and editors (``schemas/*.schema.json`` is generated from these models).

A cluster file::

    tiers: [{label: fabric.topograph.run/tier-0, oversubscription: 1.0}, ...]   # optional
    nodes:
      - name: gpu-001
        type: hgx-h100                 # a node type of gputopo.topology.catalog, or instead:
        # topology: nodes/gpu-001.txt  # nvidia-smi topo -m output or NodeTopology YAML (relative to the file)
        # gpuModel: NVIDIA H100 80GB HBM3   # names the GPUs of an nvidia-smi topology
        labels: {fabric.topograph.run/tier-0: leaf-1}
        usedGpus: [0, 1]
        taints: [{key: k, value: v, effect: NoSchedule}]
        ready: true
        schedulable: true
        driverVersion: "570.133.20"    # default: the node type's
        downLinks: [[0, 1]]            # link health
        unhealthyGpus: [3]

A cluster file may also say what runs there, for ``gputopo plan --preempt``::

    now: 7200                          # seconds, the clock of the times below
    priorityClasses:                   # checkpointWaitSeconds: how long its gangs may wait for victims' checkpoints
      - {name: research, value: 100}
      - {name: batch, value: 500, checkpointWaitSeconds: 600}
      - {name: prod, value: 1000, preemptionPolicy: Never}
    gangs:                             # running gangs; their GPUs count as used
      - name: sweep-7
        priorityClassName: research    # or priority: 100
        startTime: 1800
        checkpointTime: 6000           # the work since then is what a preemption loses
        checkpointIntervalSeconds: 1800  # and it saves every half hour: its next checkpoint is at 7800
        preemptible: true
        minRuntimeSeconds: 600
        preemptedAt: 1700              # protected for a while after a preemption
        preemptedBy: [llm-pretrain]    # never preempts these back
        workers: [{node: gpu-001, gpus: [0, 1]}]
    nominations:                       # GPUs held for a preemptor whose victims are still terminating
      - {preemptor: llm-pretrain, gpus: [{node: gpu-002, gpus: [0, 1, 2, 3]}]}

A trace file: ``jobs: [{name, arrival, duration, workers, gpusPerWorker, sliceSize}]``, and with priorities
``priorityClasses`` as above and per job ``priorityClass``, ``checkpointIntervalSeconds``,
``gracePeriodSeconds``, ``preemptible`` and ``minRuntimeSeconds``.

Whether a GPU index exists, a node type is known or a topology file is there depends on the node's
topology; the loader (``gputopo.sim.cluster_file``) checks those, naming the same fields.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictBool, model_validator

from gputopo.api.base import ApiModel

__all__ = [
    "ClusterFile",
    "ClusterGang",
    "ClusterGangWorker",
    "ClusterNode",
    "ClusterNomination",
    "ClusterTaint",
    "ClusterTier",
    "PreemptionPolicy",
    "PriorityClassEntry",
    "TaintEffect",
    "TraceFile",
    "TraceJobEntry",
    "file_schemas",
]

GpuIndex = Annotated[int, Field(ge=0, le=1023)]
LabelValue = Annotated[str, Field(max_length=63)]


class _FileModel(ApiModel):
    # Label values and driver versions written as YAML numbers (`tier-0: 1`, `driverVersion: 570.1`) are text.
    model_config = ApiModel.model_config | ConfigDict(coerce_numbers_to_str=True, strict=False)


class TaintEffect(StrEnum):
    """A Kubernetes taint's effect."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class ClusterTaint(_FileModel):
    key: str = Field(min_length=1, max_length=317)
    value: str = Field(default="", max_length=63)
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class ClusterTier(_FileModel):
    label: str = Field(min_length=1, max_length=317, description="Node label naming a node's switch at this tier.")
    oversubscription: float = Field(default=1.0, ge=1.0, le=1000.0)


class ClusterNode(_FileModel):
    name: str = Field(min_length=1, max_length=253)
    type: str | None = Field(default=None, min_length=1, description="A node type (gputopo topo show TYPE).")
    topology: str | None = Field(
        default=None, min_length=1, description="nvidia-smi topo -m output or NodeTopology YAML, relative to the file."
    )
    gpu_model: str | None = Field(default=None, description="Names the GPUs of an nvidia-smi topology.")
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    used_gpus: list[GpuIndex] = Field(default_factory=list)
    taints: list[ClusterTaint] = Field(default_factory=list)
    ready: StrictBool = True
    schedulable: StrictBool = True
    driver_version: str | None = None
    down_links: list[tuple[GpuIndex, GpuIndex]] = Field(default_factory=list)
    unhealthy_gpus: list[GpuIndex] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_topology(self) -> ClusterNode:
        if (self.type is None) == (self.topology is None):
            raise ValueError("give either type (a node type name) or topology (a file), exactly one")
        return self


class PreemptionPolicy(StrEnum):
    """Whether a gang may preempt lower-priority gangs (Kubernetes' PriorityClass field of that name)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


PriorityValue = Annotated[int, Field(ge=-2_147_483_648, le=1_000_000_000)]


class PriorityClassEntry(_FileModel):
    name: str = Field(min_length=1, max_length=253)
    value: PriorityValue
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    checkpoint_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=86400,
        description="How long its gangs may wait for their victims' next checkpoint before they preempt (0: at once).",
    )


class ClusterGangWorker(_FileModel):
    node: str = Field(min_length=1, max_length=253)
    gpus: list[GpuIndex] = Field(min_length=1)


class ClusterGang(_FileModel):
    """A running gang: preempted whole or not at all."""

    name: str = Field(min_length=1, max_length=253)
    priority: PriorityValue | None = Field(default=None, description="Or priorityClassName.")
    priority_class_name: str | None = Field(default=None, min_length=1)
    start_time: float = Field(default=0.0, description="Seconds on the clock of now.")
    checkpoint_time: float | None = Field(default=None, description="Its last checkpoint: a restart resumes there.")
    checkpoint_interval_seconds: float | None = Field(
        default=None, gt=0, description="How often it checkpoints: its next checkpoints are then known."
    )
    preemptible: StrictBool = True
    min_runtime_seconds: float = Field(default=0.0, ge=0)
    preempted_at: float | None = Field(default=None, description="When it was last preempted (protects it).")
    preempted_by: list[str] = Field(default_factory=list, description="Gangs that preempted it: never its victims.")
    workers: list[ClusterGangWorker] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_priority(self) -> ClusterGang:
        if self.priority is not None and self.priority_class_name is not None:
            raise ValueError("give priority or priorityClassName, not both")
        return self


class ClusterNomination(_FileModel):
    preemptor: str = Field(min_length=1, max_length=253)
    gpus: list[ClusterGangWorker] = Field(min_length=1)


class ClusterFile(_FileModel):
    tiers: list[ClusterTier] | None = Field(default=None, description="Network tiers, lowest first.")
    nodes: list[ClusterNode] = Field(default_factory=list)
    now: float = Field(default=0.0, description="The time of the snapshot, on the clock of the gangs' times.")
    priority_classes: list[PriorityClassEntry] = Field(default_factory=list)
    gangs: list[ClusterGang] = Field(default_factory=list, description="Running gangs; their GPUs count as used.")
    nominations: list[ClusterNomination] = Field(default_factory=list)


class TraceJobEntry(_FileModel):
    name: str = Field(min_length=1)
    arrival: float = Field(ge=0, description="Seconds from the start of the trace.")
    duration: float = Field(gt=0, description="Seconds the job runs.")
    workers: int = Field(default=1, ge=1, le=100000)
    gpus_per_worker: int = Field(ge=1, le=1024)
    slice_size: int | None = Field(default=None, ge=1, description="Ranks per NVLink-domain slice.")
    priority_class: str | None = Field(default=None, min_length=1, description="A name of priorityClasses.")
    checkpoint_interval_seconds: float | None = Field(default=None, gt=0)
    grace_period_seconds: float = Field(default=30.0, ge=0, description="Time to checkpoint when preempted.")
    preemptible: StrictBool = True
    min_runtime_seconds: float = Field(default=0.0, ge=0)


class TraceFile(_FileModel):
    priority_classes: list[PriorityClassEntry] = Field(default_factory=list)
    jobs: list[TraceJobEntry] = Field(default_factory=list)


def file_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas of the cluster and trace files, by file name (``schemas/``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, model, title in (
        ("cluster.schema.json", ClusterFile, "gputopo cluster snapshot"),
        ("trace.schema.json", TraceFile, "gputopo job trace"),
    ):
        schema = model.model_json_schema(by_alias=True)
        out[name] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}
    return out
