"""What preemption writes into statuses, and the annotations a workload declares its preemption terms with.

A preemptor's status holds its **nomination** (the GPUs held for it while its victims terminate, and the victims
named) from the moment it is decided: the victims are ended from that record, so an operator that restarts in
between finishes the preemption instead of losing it or choosing again. A victim's status holds when it was
last preempted and by whom (it is protected for a while after, and never preempts those back).
"""

from datetime import datetime
from typing import Annotated, Final

from pydantic import Field

from gputopo.api.base import StatusModel

__all__ = [
    "ANNOTATION_CHECKPOINT_INTERVAL",
    "ANNOTATION_CHECKPOINT_TIME",
    "ANNOTATION_CHECKPOINT_WAIT",
    "ANNOTATION_MIN_RUNTIME",
    "ANNOTATION_PREEMPTIBLE",
    "MAX_CHECKPOINT_WAIT_SECONDS",
    "MAX_NAMED",
    "NodeGpus",
    "NominationStatus",
    "PreemptionStatus",
]

# On a TrainingJob, or a foreign gang's pods (their template): when the workload last saved what a restart
# resumes from (RFC 3339); a preemption loses only the work since then.
ANNOTATION_CHECKPOINT_TIME: Final = "gputopo.io/checkpoint-time"
# On a foreign gang's pods: how often (seconds, > 0) the workload saves what a restart resumes from, after the
# checkpoint-time above (else after its start): its next checkpoints are then known. A TrainingJob says it in
# ``spec.preemption.checkpointIntervalSeconds``.
ANNOTATION_CHECKPOINT_INTERVAL: Final = "gputopo.io/checkpoint-interval-seconds"
# On a PriorityClass: how long (seconds, 0 to MAX_CHECKPOINT_WAIT_SECONDS) a gang of the class, once queued, may
# wait for its victims' next checkpoint rather than preempt them now. Absent or 0: it preempts at once.
ANNOTATION_CHECKPOINT_WAIT: Final = "gputopo.io/checkpoint-wait-seconds"
MAX_CHECKPOINT_WAIT_SECONDS: Final = 86_400
# On a PriorityClass (an admin's): "false" keeps the class's gangs from ever being victims. On a workload it is
# ignored: a tenant does not opt out of preemption.
ANNOTATION_PREEMPTIBLE: Final = "gputopo.io/preemptible"
# On a foreign gang's pods: seconds after its start during which the gang is not a victim (at most the operator's
# preemption.maxMinRuntimeSeconds).
ANNOTATION_MIN_RUNTIME: Final = "gputopo.io/min-runtime-seconds"

MAX_NAMED: Final = 64  # victims a nomination names; preempters a victim remembers
_MAX_GPU_INDEX: Final = 63


class NodeGpus(StatusModel):
    node: str = Field(max_length=253)
    gpus: list[Annotated[int, Field(ge=0, le=_MAX_GPU_INDEX)]] = Field(
        default_factory=list, max_length=_MAX_GPU_INDEX + 1, json_schema_extra={"x-kubernetes-list-type": "set"}
    )


class NominationStatus(StatusModel):
    """GPUs held for this gang while the gangs it preempts terminate: no other gang may take them."""

    gpus: list[NodeGpus] = Field(default_factory=list, max_length=8192, description="The GPUs held, per node.")
    victims: list[Annotated[str, Field(max_length=600)]] = Field(
        default_factory=list,
        max_length=MAX_NAMED,
        description=(
            "The gangs preempted for it: '<namespace>/<name>' for a TrainingJob, "
            "'<namespace>/<source>/<name>' for a gang gputopo places without owning it; 'uid:<UID>' for one of "
            "another namespace."
        ),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    domain: str = Field(default="", max_length=600, description="The domain the victims clear (a node, a rack, ...).")
    since: datetime | None = Field(default=None, description="When the preemption was decided.")


class PreemptionStatus(StatusModel):
    """How this gang was preempted: it is protected for a while after, and never preempts these back."""

    count: int = Field(default=0, ge=0, description="Times the gang was preempted.")
    last_preempted_at: datetime | None = Field(default=None, description="When it was last preempted.")
    preempted_by: list[Annotated[str, Field(max_length=600)]] = Field(
        default_factory=list,
        max_length=MAX_NAMED,
        description="The gangs that preempted it, most recent last ('uid:<UID>' for one of another namespace).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
