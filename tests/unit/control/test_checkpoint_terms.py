"""The checkpoint terms of preemption as the operator reads them: a PriorityClass's checkpoint-wait-seconds, a
TrainingJob's checkpointIntervalSeconds and a foreign gang's checkpoint-interval-seconds. Nothing odd ever raises:
a wait that does not parse is 0 (preempt at once) and says why; an interval that does not parse is none."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from control_builders import at, cluster, job
from pass_builders import member_body, placed
from pydantic import ValidationError
from test_gang_pass import gang as foreign_gang
from test_gang_pass import member

from gputopo.api.preemption import ANNOTATION_CHECKPOINT_INTERVAL, ANNOTATION_CHECKPOINT_WAIT
from gputopo.api.trainingjob import PreemptionTerms
from gputopo.control.holders import checkpoint_interval, gang_checkpoint_wait, job_holder
from gputopo.control.priority import PriorityClassFacts, job_priority, priority_class_facts
from gputopo.control.view import build_snapshot
from gputopo.controller.watches import ClusterWatches
from gputopo.kube.client import KubeClient
from gputopo.placement import DEFAULT_TIERS


def klass(name: str = "prod", value: int = 1000, **annotations: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}, "value": value}


@pytest.mark.parametrize(("raw", "seconds"), [("120", 120.0), ("0", 0.0), ("90.5", 90.5), (" 600 ", 600.0)])
def test_a_class_annotation_gives_its_gangs_a_checkpoint_wait(raw: str, seconds: float) -> None:
    facts = priority_class_facts(klass(**{ANNOTATION_CHECKPOINT_WAIT: raw}))
    assert facts is not None and facts.checkpoint_wait_s == seconds and facts.error == ""


def test_a_class_without_the_annotation_preempts_at_once_and_says_nothing() -> None:
    facts = priority_class_facts(klass())
    assert facts is not None and facts.checkpoint_wait_s == 0.0 and facts.error == ""
    bare = priority_class_facts({"metadata": {"name": "bare"}, "value": 5})
    assert bare is not None and bare.checkpoint_wait_s == 0.0


@pytest.mark.parametrize("raw", ["soon", "", "-5", "nan", "NaN", "inf", "86401", "1e9", "12s", 120, None, ["60"]])
def test_a_wait_that_does_not_parse_is_zero_and_names_the_class_and_annotation(raw: Any) -> None:
    facts = priority_class_facts(klass("gold", **{ANNOTATION_CHECKPOINT_WAIT: raw}))
    assert facts is not None and facts.value == 1000  # the class is still read
    assert facts.checkpoint_wait_s == 0.0
    if raw is not None:
        assert "PriorityClass gold" in facts.error and ANNOTATION_CHECKPOINT_WAIT in facts.error
        assert "read as 0" in facts.error


def test_the_largest_wait_is_a_day() -> None:
    facts = priority_class_facts(klass(**{ANNOTATION_CHECKPOINT_WAIT: "86400"}))
    assert facts is not None and facts.checkpoint_wait_s == 86_400.0 and not facts.error


def test_odd_annotations_never_raise() -> None:
    for meta in ({"name": "x", "annotations": "many"}, {"name": "x", "annotations": None}):
        facts = priority_class_facts({"metadata": meta, "value": 1})
        assert facts is not None and facts.checkpoint_wait_s == 0.0


def test_the_watch_logs_a_bad_wait_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    parse = ClusterWatches(cast(KubeClient, object()), lambda: None)._priority_class
    bad = klass("gold", **{ANNOTATION_CHECKPOINT_WAIT: "soon"})
    with caplog.at_level(logging.WARNING, logger="gputopo.controller"):
        first = parse("gold", bad, None)
        again = parse("gold", bad, first)  # a resync: the same facts, no second warning
        parse("gold", klass("gold", **{ANNOTATION_CHECKPOINT_WAIT: "60"}), again)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "PriorityClass gold" in warned[0] and ANNOTATION_CHECKPOINT_WAIT in warned[0]


def test_a_job_gets_the_wait_of_its_class_or_of_the_global_default() -> None:
    classes = {
        "prod": PriorityClassFacts("prod", 1000, checkpoint_wait_s=120.0),
        "default": PriorityClassFacts("default", 10, global_default=True, checkpoint_wait_s=30.0),
    }
    named = job("a", priority=None, priorityClassName="prod")
    assert named.spec is not None and job_priority(named.spec, classes).checkpoint_wait_s == 120.0
    plain = job("b", priority=None)
    assert plain.spec is not None and job_priority(plain.spec, classes).checkpoint_wait_s == 30.0
    above = job("c", priority=500)  # the deprecated field cannot rise above the default: the default's, wait and all
    assert above.spec is not None and job_priority(above.spec, classes) == job_priority(plain.spec, classes)
    below = job("d", priority=5)  # it may yield below it: no class, no wait
    assert below.spec is not None and job_priority(below.spec, classes).value == 5
    assert job_priority(below.spec, classes).checkpoint_wait_s == 0.0


# -- the victim's interval ----------------------------------------------------------------------------------------


def test_a_training_job_declares_its_interval_in_its_spec() -> None:
    assert PreemptionTerms.model_validate({"checkpointIntervalSeconds": 1800}).checkpoint_interval_seconds == 1800
    assert PreemptionTerms().checkpoint_interval_seconds is None
    for bad in (0, -60):
        with pytest.raises(ValidationError, match="checkpointIntervalSeconds"):
            PreemptionTerms.model_validate({"checkpointIntervalSeconds": bad})


def test_the_job_holder_carries_the_declared_interval() -> None:
    snap = build_snapshot(cluster().node("n0").view(), [], DEFAULT_TIERS)
    status = placed([("n0", list(range(8)))])
    low = job("low", preemption={"checkpointIntervalSeconds": 600})
    held = job_holder(low, status, 100, at(0), snap)
    assert held is not None and held.running.checkpoint_interval_s == 600.0
    plain = job_holder(job("plain"), status, 100, at(0), snap)
    assert plain is not None and plain.running.checkpoint_interval_s is None


@pytest.mark.parametrize(
    ("raw", "interval"),
    [("600", 600.0), ("1800.5", 1800.5), ("0", None), ("-60", None), ("nan", None), ("inf", None), ("hourly", None)],
)
def test_a_foreign_gangs_pods_declare_their_interval(raw: str, interval: float | None) -> None:
    body = {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_INTERVAL: raw}}}
    assert checkpoint_interval(body) == interval


def test_an_odd_pod_body_declares_no_interval() -> None:
    for body in ({}, {"metadata": None}, {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_INTERVAL: 600}}}):
        assert checkpoint_interval(body) is None


def test_a_foreign_gang_waits_as_its_pods_class_allows() -> None:
    classes = {
        "prod": PriorityClassFacts("prod", 1000, checkpoint_wait_s=120.0),
        "research": PriorityClassFacts("research", 100, checkpoint_wait_s=600.0),
    }
    g = foreign_gang(member(0), member(1), priority=1000)
    bodies = {m.uid: member_body(m) for m in g.members}
    assert gang_checkpoint_wait(g, bodies, classes) == 0.0  # no class named
    for b in bodies.values():
        b["spec"]["priorityClassName"] = "prod"
    assert gang_checkpoint_wait(g, bodies, classes) == 120.0
    # A class whose value is not the gang's priority is not the class that gave it: no wait from it.
    for b in bodies.values():
        b["spec"]["priorityClassName"] = "research"
    assert gang_checkpoint_wait(g, bodies, classes) == 0.0
    assert gang_checkpoint_wait(g, {}, classes) == 0.0
