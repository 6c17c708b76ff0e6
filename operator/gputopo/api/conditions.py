"""Conditions as the Kubernetes API conventions define them (metav1.Condition)."""

from datetime import UTC, datetime
from typing import Final, Literal

from pydantic import Field

from gputopo.api.base import StatusModel

__all__ = [
    "DEGRADED",
    "FAILED",
    "GPUS_AS_PLANNED",
    "HEALTHY",
    "INVALID",
    "KUEUE_ADMITTED",
    "PLACED",
    "PREEMPTED",
    "SUCCEEDED",
    "Condition",
    "set_condition",
]

# A TrainingJob's condition types.
PLACED: Final = "Placed"  # the gang has a plan (True), or why not
INVALID: Final = "Invalid"  # the spec, or the pods it makes, cannot be run as written
DEGRADED: Final = "Degraded"  # a part under the gang failed and the job runs on (tolerated, or waiting)
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
PREEMPTED: Final = "Preempted"  # True while the job waits after a higher-priority gang preempted it
KUEUE_ADMITTED: Final = "KueueAdmitted"  # a job in a Kueue queue: its Workload is admitted (True), or why not
GPUS_AS_PLANNED: Final = "GpusAsPlanned"  # the pods hold the planned GPUs: Unknown until every rank is reported
# A NodeTopology's condition type.
HEALTHY: Final = "Healthy"


class Condition(StatusModel):
    type: str = Field(description="Type of condition in CamelCase, e.g. Placed, Ready, Invalid.")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: datetime | None = None


def set_condition(
    conditions: list[Condition],
    new: Condition,
    now: datetime | None = None,
) -> list[Condition]:
    """Return the list with ``new`` merged in; the transition time moves only when the status changes."""
    stamp = now or datetime.now(UTC)
    out: list[Condition] = []
    replaced = False
    for old in conditions:
        if old.type != new.type:
            out.append(old)
            continue
        replaced = True
        changed = old.status != new.status
        out.append(
            new.model_copy(update={"last_transition_time": stamp if changed else (old.last_transition_time or stamp)})
        )
    if not replaced:
        out.append(new.model_copy(update={"last_transition_time": stamp}))
    return out
