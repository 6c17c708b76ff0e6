"""One malformed TrainingJob is marked Invalid, naming the field; the other jobs of the pass are still placed.

The pod template is free-form in the CRD, so the API server stores shapes the operator must not trip over.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from control_builders import at, cluster, job
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_builders import CONFIG, actions_of, run

from gputopo.control import reconcile
from gputopo.control.facts import JobFacts
from gputopo.control.memory import retry_delay
from gputopo.placement import place

GOOD = {"name": "trainer", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 8}}}


def _template(**pod: Any) -> dict[str, Any]:
    return {"spec": {"containers": [GOOD], **pod}}


def _container(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{**GOOD, **fields}]}}


@pytest.mark.parametrize(
    ("template", "words"),
    [
        (_template(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "yes"}}),
         "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: expected an "
         "object, got a string"),
        (_template(nodeSelector=["pool=a"]), "spec.template.spec.nodeSelector: expected an object, got a list"),
        (_template(tolerations=["gpu"]), "spec.template.spec.tolerations[0]: expected an object, got a string"),
        (_template(tolerations=[{"key": "gpu", "operator": "Maybe"}]),
         "spec.template.spec.tolerations[0].operator: 'Maybe' is not one of Equal, Exists"),
        (_container(resources="8 GPUs"),
         "spec.template.spec.containers[0].resources: expected an object, got a string"),
        (_container(resources={"limits": ["nvidia.com/gpu"]}),
         "spec.template.spec.containers[0].resources.limits: expected an object, got a list"),
        ({"spec": {"containers": "trainer"}}, "spec.template: Value error, template.spec.containers must list"),
        ({"spec": "pod"}, "spec.template: Value error, template.spec.containers must list at least one"),
        (_container(ports=[{"name": "master", "containerPort": "http"}]),
         "spec.template.spec.containers[0].ports[0].containerPort: expected a port number, got 'http'"),
    ],
    ids=["affinity-required-yes", "node-selector-as-list", "toleration-as-string", "toleration-operator-unknown",
         "resources-as-string", "limits-as-list", "containers-as-string", "pod-spec-as-string",
         "container-port-as-text"],
)  # fmt: skip
def test_a_malformed_job_is_invalid_and_the_others_are_placed(template: dict[str, Any], words: str) -> None:
    bad = job("bad", template=template)
    good = job("good", created=1.0)
    result = run([bad, good], cluster().node("n1").node("n2").view())
    bad_actions = actions_of(result, "bad")
    assert bad_actions.status is not None and bad_actions.pods == []
    invalid = next(c for c in bad_actions.status.conditions if c.type == "Invalid")
    assert invalid.status == "True" and invalid.reason == "InvalidSpec"
    assert words in invalid.message
    good_actions = actions_of(result, "good")
    assert [p["metadata"]["name"] for p in good_actions.pods] == ["good-0"]


def test_many_malformed_jobs_never_stop_a_pass() -> None:
    shapes = [
        _template(affinity="yes"), _template(nodeSelector="a"), _template(tolerations="all"),
        _container(resources=[1]), _container(env="x"), {"spec": None}, {"metadata": "x", "spec": {}},
    ]  # fmt: skip
    bad = [job(f"bad-{i}", template=t, created=float(i)) for i, t in enumerate(shapes)]
    good = job("good", created=100.0)
    result = run([*bad, good], cluster().node("n1").node("n2").view())
    assert [p["metadata"]["name"] for p in actions_of(result, "good").pods] == ["good-0"]


def test_a_job_the_operator_trips_over_is_fenced_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever validation misses: an error while stepping one job marks it Invalid, and the pass goes on.
    real = reconcile.step

    def tripping(j: JobFacts, *args: Any) -> Any:
        if j.name == "bad":
            raise AttributeError("'str' object has no attribute 'get'")
        return real(j, *args)

    monkeypatch.setattr(reconcile, "step", tripping)
    result = run([job("bad"), job("good", created=1.0)], cluster().node("n1").node("n2").view())
    status = actions_of(result, "bad").status
    assert status is not None
    invalid = next(c for c in status.conditions if c.type == "Invalid")
    assert "could not read this job (AttributeError: 'str' object has no attribute 'get')" in invalid.message
    assert [p["metadata"]["name"] for p in actions_of(result, "good").pods] == ["good-0"]


def test_pods_the_api_server_refused_make_the_job_invalid_free_its_gpus_and_stop_retrying() -> None:
    view = cluster().node("n1").view()
    first = run([job("bad")], view)
    placed_status = actions_of(first, "bad").status
    assert placed_status is not None and placed_status.placement is not None
    refused = job("bad", status=placed_status)
    answer = "the API server refused the gang's pods: create pod bad-0: 422 Invalid: port 70000 must be 1-65535"
    result = reconcile.run_pass(
        reconcile.PassInput(
            {refused.key: refused}, {}, view, at(20), first.reservations, refused={refused.key: answer}
        ),
        reconcile.PassRules(CONFIG, place),
    )
    status = actions_of(result, "bad").status
    assert status is not None
    invalid = next(c for c in status.conditions if c.type == "Invalid")
    assert (invalid.status, invalid.reason, invalid.message) == ("True", "PodRefused", answer)
    assert status.phase == "Pending" and not (status.placement and status.placement.workers)
    assert result.outcomes == [] and result.reservations == []
    # Later passes read the refusal from the status: no new attempt until the spec changes.
    again = reconcile.run_pass(
        reconcile.PassInput({refused.key: job("bad", status=status)}, {}, view, at(30)),
        reconcile.PassRules(CONFIG, place),
    )
    assert again.outcomes == [] and all(not a.pods for a in again.actions)
    edited = replace(job("bad", status=status), generation=2)
    retried = reconcile.run_pass(
        reconcile.PassInput({edited.key: edited}, {}, view, at(40)), reconcile.PassRules(CONFIG, place)
    )
    assert [p["metadata"]["name"] for p in actions_of(retried, "bad").pods] == ["bad-0"]


@pytest.mark.parametrize(("failures", "delay"), [(1, 0.5), (2, 1.0), (5, 8.0), (7, 30.0), (50, 30.0)],
                         ids=["first", "second", "fifth", "capped", "long-run"])  # fmt: skip
def test_failed_applies_back_off(failures: int, delay: float) -> None:
    assert retry_delay(failures) == delay


_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8)
_garbage = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
_POD_FIELDS = ["affinity", "nodeSelector", "tolerations", "containers", "restartPolicy", "nodeName", "schedulingGates"]
_CONTAINER_FIELDS = ["resources", "ports", "env", "name", "image"]


@settings(max_examples=300, deadline=None)
@given(
    where=st.sampled_from([("pod", f) for f in _POD_FIELDS] + [("container", f) for f in _CONTAINER_FIELDS]),
    value=_garbage,
)
def test_generated_garbage_in_a_template_never_stops_the_pass(where: tuple[str, str], value: Any) -> None:
    kind, name = where
    template = _template(**{name: value}) if kind == "pod" else _container(**{name: value})
    bad = job("bad", template=template)  # a spec the schema refuses has spec None and its error kept
    good = job("good", created=1.0)
    result = run([bad, good], cluster().node("n1").node("n2").view())
    assert [p["metadata"]["name"] for p in actions_of(result, "good").pods] == ["good-0"]
