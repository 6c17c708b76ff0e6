"""The API models parse and validate objects in Python, with messages that name the field."""

from typing import Any

import pytest
from pydantic import ValidationError

from gputopo.api import Condition, TrainingJob, TrainingJobSpec, set_condition
from gputopo.api.labels import label_value

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}}


def spec(**overrides: Any) -> dict[str, Any]:
    return {"workers": 2, "gpusPerWorker": 8, "template": TEMPLATE, **overrides}


def test_defaults() -> None:
    parsed = TrainingJobSpec.model_validate(spec())
    assert parsed.failure_policy.max_restarts == 3
    assert parsed.topology.intra_node == "any"
    assert parsed.gpu.same_model is True
    assert parsed.to_api()["failurePolicy"]["onLinkFailure"] == "Reschedule"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"gpusPerWorker": 17}, "gpusPerWorker"),
        ({"failurePolicy": {"maxRestarts": -1}}, "failurePolicy.maxRestarts"),
        ({"topology": {"intraNode": "infiniband"}}, "topology.intraNode"),
        ({"topology": {"interNode": {"requiredTier": 9}}}, "topology.interNode.requiredTier"),
        ({"template": {"spec": {"containers": []}}}, "template"),
        ({"gpusPerWroker": 8}, "gpusPerWroker"),
    ],
    ids=["no-workers", "too-many-gpus", "negative-restarts", "unknown-intra-node", "tier-too-high",
         "no-containers", "typo"],
)  # fmt: skip
def test_invalid_spec_names_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        TrainingJobSpec.model_validate(spec(**overrides))
    locations = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
    assert field in locations


def test_whole_object_round_trip() -> None:
    obj = {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": spec(),
        "status": {"phase": "Running", "restarts": 1, "unknownFutureField": True},
    }
    job = TrainingJob.model_validate(obj)
    assert (job.name, job.namespace, job.status.phase, job.status.restarts) == ("llm", "team-a", "Running", 1)


def test_condition_transition_time_moves_only_on_status_change() -> None:
    from datetime import UTC, datetime

    t1, t2 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    first = set_condition([], Condition(type="Placed", status="False", reason="Waiting"), now=t1)
    same = set_condition(first, Condition(type="Placed", status="False", reason="StillWaiting"), now=t2)
    flipped = set_condition(same, Condition(type="Placed", status="True", reason="Placed"), now=t2)
    assert same[0].last_transition_time == t1 and same[0].reason == "StillWaiting"
    assert flipped[0].last_transition_time == t2


@pytest.mark.parametrize(
    ("text", "value"),
    [("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"), ("A100-SXM4 (40GB)", "A100-SXM4-40GB"), ("", "")],
    ids=["h100", "parentheses", "empty"],
)
def test_label_value(text: str, value: str) -> None:
    assert label_value(text) == value
