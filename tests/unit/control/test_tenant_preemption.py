"""What one tenant cannot make the operator's preemption do, on plain data: carry out a nomination the operator did
not choose, preempt with a class the operator's list does not allow in its namespace, preempt for ranks whose pods
do not exist."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from control_builders import job
from test_gang_pass import gang as foreign_gang
from test_gang_pass import member, recorded
from test_preemption_pass import (
    HIGH,
    LOW,
    SETTINGS,
    _gang_input,
    _low_on_two_nodes,
    low_running,
    read_back,
    step,
    tj,
    view,
)

from gputopo.api.conditions import PREEMPTED
from gputopo.api.preemption import NodeGpus, NominationStatus
from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.admission import AdmissionAnswer, admission_signature
from gputopo.control.preemptions import PreemptionSettings, may_preempt
from gputopo.control.priority import PriorityClassFacts, job_priority, priority_class_facts
from gputopo.placement import Placement
from gputopo.placement.preemption import PreemptionRules, RunningGang, min_runtime


def forged(victims: list[str]) -> NominationStatus:
    return NominationStatus(gpus=[NodeGpus(node="n0", gpus=list(range(8)))], victims=victims, domain="n0")


def test_a_nomination_the_operator_did_not_choose_ends_nobody_and_is_cleared() -> None:
    """A tenant writes a nomination naming another's running job into its own job's status."""
    low, pods = low_running()
    mine = tj("high", "research")  # of the victim's own priority: the operator would choose nobody for it
    mine = replace(mine, status=mine.status.model_copy(update={"nomination": forged(["default/low"])}))
    result = step([low, mine], pods, view(*pods))
    assert not any(a.job == LOW and a.deletions for a in result.actions)
    written = next(a.status for a in result.actions if a.job == HIGH and a.status is not None)
    assert written.nomination is None


def test_a_restarted_operator_carries_out_no_nomination_it_did_not_decide_and_decides_again() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    assert high.status.nomination is not None
    result = step([low, high], pods, view(*pods), now=1001.0, restarted=True)
    assert not any(a.job == LOW and a.deletions for a in result.actions)
    assert HIGH in result.nominated  # decided afresh, by this operator: the next pass carries it out
    again = step([low, read_back(high, result)], pods, view(*pods), now=1002.0)
    assert any(a.job == LOW and a.deletions for a in again.actions)


def test_the_same_operator_carries_out_its_own_nomination() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    result = step([low, high], pods, view(*pods), now=1001.0)
    assert any(a.job == LOW and a.deletions for a in result.actions)


MAY_PREEMPT = [
    # (case, the operator's list, class, namespace, may it preempt)
    ("no-list-any-class", {}, "prod", "team-a", True),
    ("listed-in-its-namespace", {"prod": frozenset({"team-a"})}, "prod", "team-a", True),
    ("listed-elsewhere", {"prod": frozenset({"team-a"})}, "prod", "team-b", False),
    ("listed-everywhere", {"prod": frozenset({"*"})}, "prod", "team-b", True),
    ("not-listed", {"prod": frozenset({"*"})}, "urgent", "team-a", False),
    ("no-class-with-a-list", {"prod": frozenset({"*"})}, "", "team-a", False),
]


@pytest.mark.parametrize(("case", "listed", "cls", "ns", "allowed"), MAY_PREEMPT, ids=[c[0] for c in MAY_PREEMPT])
def test_which_classes_may_preempt_where(
    case: str, listed: dict[str, frozenset[str]], cls: str, ns: str, allowed: bool
) -> None:
    assert may_preempt(PreemptionSettings(preemptors=listed), cls, ns) is allowed


@pytest.mark.parametrize(
    ("listed", "nominated"),
    [({"prod": frozenset({"default"})}, True), ({"prod": frozenset({"team-a"})}, False)],
    ids=["its-class-is-listed-in-its-namespace", "its-class-is-listed-only-elsewhere"],
)
def test_a_job_preempts_only_with_a_class_listed_for_its_namespace(
    listed: dict[str, frozenset[str]], nominated: bool
) -> None:
    low, pods = low_running()
    result = step([low, tj("high", "prod")], pods, view(*pods), settings=replace(SETTINGS, preemptors=listed))
    assert (HIGH in result.nominated) is nominated


@pytest.mark.parametrize(
    ("ranks", "owned", "nominated"),
    [((0,), False, False), ((0, 1), False, True), ((0,), True, True)],
    ids=["bare-pods-one-rank-missing", "bare-pods-every-rank", "an-owner-declares-the-size"],
)
def test_a_gang_of_bare_pods_preempts_only_once_every_declared_rank_exists(
    ranks: tuple[int, ...], owned: bool, nominated: bool
) -> None:
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(*(member(r) for r in ranks), priority=1000, evict_bare=True)
    if not owned:
        pending = replace(pending, owner=None)
    result = step([low], pods, v, gangs=_gang_input(pending, None))
    assert bool(result.nominated) is nominated


CLAMPED = [
    # (case, the gang's own minimum runtime, the cluster's longest, the minimum runtime that counts)
    ("its-own-within-the-clusters", 300.0, 600.0, 300.0),
    ("its-own-past-the-clusters", 3600.0, 600.0, 600.0),
    ("for-ever", float("inf"), 600.0, 600.0),
    ("nan", float("nan"), 600.0, 600.0),
    ("negative", -5.0, 600.0, 0.0),
]


@pytest.mark.parametrize(("case", "own", "longest", "counted"), CLAMPED, ids=[c[0] for c in CLAMPED])
def test_a_gangs_minimum_runtime_is_bounded_by_the_clusters(
    case: str, own: float, longest: float, counted: float
) -> None:
    gang = RunningGang("ns/g", 0, Placement((), 0.0, ""), min_runtime_s=own)
    assert min_runtime(gang, PreemptionRules(max_min_runtime_s=longest)) == counted


CLASS_BODIES = [
    ("protected", {"gputopo.io/preemptible": "false"}, True),
    ("not-protected", {}, False),
    ("any-other-word", {"gputopo.io/preemptible": "no"}, False),
]


@pytest.mark.parametrize(("case", "notes", "protected"), CLASS_BODIES, ids=[c[0] for c in CLASS_BODIES])
def test_a_priority_class_protects_its_gangs_only_with_the_exact_annotation(
    case: str, notes: dict[str, str], protected: bool
) -> None:
    found = priority_class_facts({"metadata": {"name": "c", "annotations": notes}, "value": 5})
    assert isinstance(found, PriorityClassFacts) and found.protected is protected


DEPRECATED = [
    # (case, spec.priority, the cluster's classes, the priority the job gets)
    ("no-default-cannot-rise-above-zero", 1000, {}, 0),
    ("no-default-may-yield-below-zero", -5, {}, -5),
    ("cannot-rise-above-the-default", 1000, {"d": PriorityClassFacts("d", 100, global_default=True)}, 100),
    ("may-yield-below-the-default", 7, {"d": PriorityClassFacts("d", 100, global_default=True)}, 7),
]


@pytest.mark.parametrize(("case", "value", "classes", "granted"), DEPRECATED, ids=[c[0] for c in DEPRECATED])
def test_the_deprecated_priority_never_beats_what_the_cluster_grants(
    case: str, value: int, classes: dict[str, PriorityClassFacts], granted: int
) -> None:
    spec = job("old", priority=value).spec
    assert spec is not None and job_priority(spec, classes).value == granted


def test_messages_name_a_gang_of_another_namespace_by_its_uid() -> None:
    """A gang of namespace team preempts a TrainingJob of namespace default: neither tenant's messages or Events
    name the other's namespace or job, only its UID."""
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1), priority=1000)
    first = step([low], pods, v, gangs=_gang_input(pending, None))
    record = recorded(first)
    assert f"UID {low.uid}" in record.message and "default/low" not in record.message
    said = [e.message for a in first.gang_actions for _, e in a.events]
    assert said and all("default/low" not in m for m in said)
    result = step([low], pods, v, now=1001.0, gangs=_gang_input(pending, record))
    theirs = next(a for a in result.actions if a.job == LOW)
    assert theirs.status is not None
    preempted = next(c for c in theirs.status.conditions if c.type == PREEMPTED)
    assert "team/" not in preempted.message and "UID " in preempted.message
    assert all("team/" not in e.message for e in theirs.events)


def test_a_job_preempts_nobody_before_the_api_server_said_it_would_admit_its_pods() -> None:
    """The pass asks for a dry run of one rank's pod as the job would create it, and preempts nobody meanwhile."""
    low, pods = low_running()
    high = tj("high", "prod")
    first = step([low, high], pods, view(*pods), admissions={})
    assert HIGH not in first.nominated
    (check,) = first.admission_checks
    assert check.key == HIGH and check.signature == admission_signature(high)
    assert check.pod["spec"]["priorityClassName"] == "prod"
    assert check.pod["metadata"]["namespace"] == "default" and check.pod["metadata"]["name"] == "high-0"
    assert check.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


ANSWERS = [
    # (case, the answer, nominated, asked again)
    ("admitted", lambda sig: AdmissionAnswer(sig, ""), True, False),
    ("refused", lambda sig: AdmissionAnswer(sig, 'pods "high-0" is forbidden: exceeded quota'), False, False),
    ("answered-for-the-job-as-it-was", lambda sig: AdmissionAnswer("other/1", ""), False, True),
]


@pytest.mark.parametrize(("case", "answer", "nominated", "asked"), ANSWERS, ids=[c[0] for c in ANSWERS])
def test_a_job_preempts_only_on_an_admission_of_the_job_as_it_is(
    case: str, answer: Callable[[str], AdmissionAnswer], nominated: bool, asked: bool
) -> None:
    low, pods = low_running()
    high = tj("high", "prod")
    given = {HIGH: answer(admission_signature(high))}
    result = step([low, high], pods, view(*pods), admissions=given)
    assert (HIGH in result.nominated) is nominated
    assert bool(result.admission_checks) is asked
    if case == "refused":
        mine = next(a.status for a in result.actions if a.job == HIGH and a.status is not None)
        placed_ = next(c for c in mine.conditions if c.type == "Placed")
        assert 'the API server would refuse its pods: pods "high-0" is forbidden: exceeded quota' in placed_.message


def test_a_forged_nomination_holds_no_gpus() -> None:
    """A nomination naming no victim, only free GPUs, would reserve them for the forger ahead of the queue."""
    forger = tj("high", "research")
    forger = replace(forger, status=forger.status.model_copy(update={"nomination": forged([])}))
    first_in_line = tj("older", "research")  # created before the forger: first in the queue
    result = step([forger, first_in_line], [], view())
    assert [p["metadata"]["name"] for a in result.actions if a.job[1] == "older" for p in a.pods] == ["older-0"]


def test_a_nomination_and_preempted_by_name_a_gang_of_another_namespace_by_uid_and_still_are_carried_out() -> None:
    """A gang of namespace team preempts a TrainingJob of namespace default: the gang's nomination lists its victim
    as ``uid:<UID>``, the victim's ``preemptedBy`` lists the gang so too, and the operator, which chose that
    victim, still carries the nomination out."""
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1), priority=1000)
    record = recorded(step([low], pods, v, gangs=_gang_input(pending, None)))
    assert record.nomination is not None and record.nomination.victims == [f"uid:{low.uid}"]
    result = step([low], pods, v, now=1001.0, gangs=_gang_input(pending, record))
    theirs = next(a for a in result.actions if a.job == LOW)
    assert theirs.deletions  # carried out
    assert theirs.status is not None and theirs.status.preemption is not None
    by = theirs.status.preemption.preempted_by
    assert len(by) == 1 and by[0].startswith("uid:") and "team" not in by[0]


@pytest.mark.parametrize("victim", ["uid:{uid}", "uid:someone-else"], ids=["uid-of-a-running-job", "unknown-uid"])
def test_a_forged_nomination_naming_a_uid_ends_nobody(victim: str) -> None:
    low, pods = low_running()
    mine = tj("high", "research")
    nomination = forged([victim.format(uid=low.uid)])
    mine = replace(mine, status=mine.status.model_copy(update={"nomination": nomination}))
    result = step([low, mine], pods, view(*pods))
    assert not any(a.job == LOW and a.deletions for a in result.actions)
    written = next(a.status for a in result.actions if a.job == HIGH and a.status is not None)
    assert written.nomination is None


def test_a_gang_never_preempts_one_that_preempted_it_named_by_uid() -> None:
    low, pods = low_running()
    high = tj("high", "prod")
    lately = {"preemption": {"preemptedBy": [f"uid:{low.uid}"]}}
    high = replace(high, status=TrainingJobStatus.model_validate(lately))
    assert step([low, high], pods, view(*pods)).nominated == {}
