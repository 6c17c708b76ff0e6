"""One object the operator trips over stays with its owner: its gang or job is refused, naming what failed, and
the rest of the pass goes on. And the operator's own facts of pods and jobs read any label, annotation or spec
field without raising."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from control_builders import T0, at, cluster, job
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_builders import CONFIG, actions_of, member_body, planner, run

from gputopo.api.group import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_GENERATION, LABEL_JOB, LABEL_RANK
from gputopo.control import gangpass, reconcile
from gputopo.control.facts import JobFacts, JobKey, job_facts, pod_facts
from gputopo.control.gangpass import GangInput
from gputopo.control.queue import Limits, QueuedJob, drain
from gputopo.control.reconcile import PassInput, PassRules, run_pass
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member, OwnerRef
from gputopo.placement import Placement, Request, Snapshot, place
from gputopo.placement.types import NodeInfo, Unplaceable
from gputopo.topology.catalog import load_node_type

HUGE = "3" * 5000


def _queued(name: str, planner: Any = None) -> QueuedJob:
    return QueuedJob(JobKey(("ns", name)), 0, T0, Request(workers=1, gpus_per_worker=2, name=name), planner=planner)


def test_a_job_whose_planning_trips_a_bug_is_unplaceable_and_the_queue_goes_on() -> None:
    def tripping(snapshot: Snapshot) -> Placement | Unplaceable:
        raise ZeroDivisionError("division by zero")

    snapshot = Snapshot([NodeInfo("n1", load_node_type("hgx-h100"))])
    outcomes, _ = drain(snapshot, [_queued("bad", tripping), _queued("good")], place, T0, Limits(300))
    results = {o.queued.name: o.result for o in outcomes}
    assert results["bad"] == Unplaceable("gputopo could not plan it: ZeroDivisionError: division by zero")
    assert isinstance(results["good"], Placement)


def _member(name: str, rank: int) -> Member:
    return Member(f"{name}-{rank}", f"{name}-uid-{rank}", rank, 8, (GATE,), None, created=at(0))


def _gang(name: str) -> Gang:
    owner = OwnerRef("batch/v1", "Job", name, f"{name}-uid")
    return Gang(GangId("team", "job", name), Declared(2, (8, 8)), (_member(name, 0), _member(name, 1)), owner=owner)


def test_a_gang_whose_step_trips_a_bug_is_refused_naming_it_and_the_others_are_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = gangpass.step

    def tripping(gang: Gang, *args: Any) -> Any:
        if gang.id.name == "bad" and not gang.problems:
            raise IndexError("tuple index out of range")
        return step(gang, *args)

    monkeypatch.setattr(gangpass, "step", tripping)
    gangs: Sequence[Gang] = (_gang("bad"), _gang("good"))
    bodies = {m.uid: member_body(m) for g in gangs for m in g.members}
    given_ = GangInput({JobKey(g.id.key): g for g in gangs}, {}, bodies, planner, 300.0)
    view = cluster().node("n0").node("n1", leaf="leaf-a").view()
    result = run_pass(PassInput({}, {}, view, at(10), gangs=given_), PassRules(CONFIG, place))
    by_key = {a.key: a for a in result.gang_actions}
    bad = by_key[JobKey(("team", "job/bad"))].status
    assert bad is not None and bad["phase"] == "Refused"
    assert bad["message"] == "gputopo could not decide for the gang: IndexError: tuple index out of range"
    assert [p.job for p in result.gang_plans] == [JobKey(("team", "job/good"))]


KEYS = [LABEL_RANK, LABEL_JOB, ANNOTATION_GPUS, ANNOTATION_PLACEMENT_GENERATION, "gputopo.io/gang"]
garbage = st.one_of(
    st.sampled_from([HUGE, f"0,{HUGE}", "1" * 20, "-1", "+3", "1_000", "\u0663", "\u00b2", "nan", "x" * 10_000]),
    st.integers(-(10**30), 10**30),
    st.text(max_size=20),
    st.none(),
    st.booleans(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
)
spec_fields = st.dictionaries(
    st.sampled_from(["workers", "gpusPerWorker", "priority", "template", "topology", "maxRestarts"]), garbage
)


@settings(max_examples=200, deadline=None)
@given(
    labels=st.dictionaries(st.sampled_from(KEYS), garbage, max_size=4),
    annotations=st.dictionaries(st.sampled_from(KEYS), garbage, max_size=4),
    gpus=garbage,
    generation=garbage,
    spec=spec_fields,
)
def test_no_field_of_a_pod_or_job_raises_out_of_its_facts(
    labels: dict[str, Any], annotations: dict[str, Any], gpus: Any, generation: Any, spec: dict[str, Any]
) -> None:
    meta = {"name": "p", "namespace": "team", "labels": labels, "annotations": annotations, "generation": generation}
    containers = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    pod = pod_facts({"metadata": meta, "spec": {"containers": containers}})
    assert pod.rank is None or 0 <= pod.rank < 2**63
    assert pod.planned_gpus is None or all(0 <= g <= 63 for g in pod.planned_gpus)
    job = job_facts({"metadata": meta, "spec": spec, "status": {"phase": generation}})
    assert job.generation >= 1 and len(job.spec_error) < 4_000


def test_a_rank_label_of_5000_digits_reads_as_no_rank() -> None:
    pod = pod_facts({"metadata": {"name": "p", "labels": {LABEL_RANK: HUGE}, "annotations": {ANNOTATION_GPUS: HUGE}}})
    assert pod.rank is None and pod.planned_gpus is None


TRIPS = {
    "recursion": RecursionError("maximum recursion depth exceeded"),
    "zero division": ZeroDivisionError("division by zero"),
    "overflow": OverflowError("cannot convert float infinity to integer"),
    "runtime": RuntimeError("dictionary changed size during iteration"),
}


@pytest.mark.parametrize("error", TRIPS.values(), ids=TRIPS.keys())
def test_a_job_whose_step_trips_any_error_is_invalid_and_the_others_are_placed(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    real = reconcile.step

    def tripping(j: JobFacts, *args: Any) -> Any:
        if j.name == "bad":
            raise error
        return real(j, *args)

    monkeypatch.setattr(reconcile, "step", tripping)
    result = run([job("bad"), job("good", created=1.0)], cluster().node("n1").node("n2").view())
    status = actions_of(result, "bad").status
    assert status is not None
    invalid = next(c for c in status.conditions if c.type == "Invalid")
    assert f"could not read this job ({type(error).__name__}: {error})" in invalid.message
    assert [p["metadata"]["name"] for p in actions_of(result, "good").pods] == ["good-0"]
