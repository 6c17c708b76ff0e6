"""Preemption in the control pass, on plain data: nominated first, victims ended from the nomination, the GPUs
held for the preemptor alone, and every way a gang may not preempt or be preempted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import pytest
from control_builders import T0, at, cluster, job, pod
from pass_builders import CONFIG, TRUSTED, actions_of, member_body, placed, running
from pass_builders import planner as gang_planner
from test_gang_pass import KEY, OWNER, member, recorded, two_nodes
from test_gang_pass import gang as foreign_gang
from test_gang_pass import run as run_gangs

from gputopo.api.conditions import INVALID, PLACED, PREEMPTED
from gputopo.api.trainingjob import JobPhase, TrainingJobStatus
from gputopo.control.admission import AdmissionAnswer
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.gangpass import GangInput, GangPlanner
from gputopo.control.gangrecords import GangRecord
from gputopo.control.preemptions import PreemptionSettings
from gputopo.control.priority import PriorityClassFacts
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang
from gputopo.gangs.planning import plan_gang, preemptor_shapes
from gputopo.placement import DEFAULT_TIERS, place
from gputopo.placement.preemption import Nomination, PreemptionPolicy
from gputopo.placement.types import Placement, Snapshot, Unplaceable

CLASSES = {
    "research": PriorityClassFacts("research", 100),
    "prod": PriorityClassFacts("prod", 1000),
    "urgent-never": PriorityClassFacts("urgent-never", 5000, PreemptionPolicy.NEVER),
    "sheltered": PriorityClassFacts("sheltered", 100, protected=True),  # gputopo.io/preemptible: "false"
    "sheltered-low": PriorityClassFacts("sheltered-low", 10, protected=True),
}
SETTINGS = PreemptionSettings()
HIGH, LOW = JobKey(("default", "high")), JobKey(("default", "low"))


def view(*pods: PodFacts, cordon: str = "") -> ClusterView:
    builder = cluster().node("n0").with_pods(*pods)
    base = builder.view()
    if cordon:
        nodes = {**base.nodes, cordon: replace(base.nodes[cordon], schedulable=False)}
        base = replace(base, nodes=nodes)
    return replace(base, priority_classes=CLASSES)


def tj(name: str, cls: str | None, status: TrainingJobStatus | None = None, gpus: int = 8, **spec: object) -> JobFacts:
    extra: dict[str, object] = {"priorityClassName": cls} if cls else {}
    return job(name, gpus=gpus, priority=None, status=status, created=1.0 if name == "high" else 0.0, **extra, **spec)


def low_running(**spec: object) -> tuple[JobFacts, list[PodFacts]]:
    status = running(placed([("n0", list(range(8)))]))
    status.conditions = []
    low = tj("low", "research", status, **spec)
    return low, [pod(low, 0, node="n0", gpus=tuple(range(8)), phase="Running")]


def step(
    jobs: Sequence[JobFacts],
    pods: Sequence[PodFacts],
    v: ClusterView,
    now: float = 1000.0,
    *,
    busy: Sequence[JobKey] = (),
    nominated: dict[JobKey, tuple[Nomination, datetime]] | None = None,
    gangs: GangInput | None = None,
    settings: PreemptionSettings | None = SETTINGS,
    restarted: bool = False,
    admissions: Mapping[JobKey, AdmissionAnswer] | None = None,
) -> PassResult:
    """One pass of the operator that ran the test's earlier passes (``TRUSTED``), or of a new one (``restarted``)."""
    if restarted:
        TRUSTED.clear()
    by_job: dict[JobKey, list[PodFacts]] = {}
    for p in pods:
        by_job.setdefault(JobKey((p.namespace, str(p.job))), []).append(p)
    facts = PassInput(
        {j.key: j for j in jobs},
        by_job,
        v,
        at(now),
        busy=frozenset(busy),
        gangs=gangs,
        nominated=nominated or {},
        trusted=dict(TRUSTED),
        admissions=admissions,
    )
    result = run_pass(facts, PassRules(CONFIG, place, preemption=settings))
    TRUSTED.clear()
    TRUSTED.update(result.trusted)
    return result


def read_back(j: JobFacts, result: PassResult) -> JobFacts:
    """The job as the watch reads it after the pass's status write."""
    written = next((a.status for a in result.actions if a.job == j.key and a.status is not None), None)
    return replace(j, status=written) if written is not None else j


def test_a_preemption_is_first_only_a_nomination_in_the_preemptors_status() -> None:
    low, pods = low_running()
    high = tj("high", "prod")
    result = step([low, high], pods, view(*pods))
    mine = actions_of(result, "high")
    assert mine.status is not None and mine.status.nomination is not None
    assert mine.status.nomination.victims == ["default/low"]
    assert [(g.node, g.gpus) for g in mine.status.nomination.gpus] == [("n0", list(range(8)))]
    placed_ = next(c for c in mine.status.conditions if c.type == PLACED)
    assert placed_.reason == "Preempting" and "default/low" in placed_.message
    assert any(e.reason == "Preempting" for e in mine.events)
    assert not any(a.job == LOW and (a.deletions or a.status) for a in result.actions)  # nobody ended yet
    assert HIGH in result.nominated and result.preempted == []


def test_the_victims_of_a_recorded_nomination_are_ended_with_their_grace_and_no_restart_charged() -> None:
    low, pods = low_running(failurePolicy={"gracePeriodSeconds": 45})
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    result = step([low, high], pods, view(*pods), now=1001.0)
    theirs = actions_of(result, "low")
    assert [(d.name, d.grace_seconds) for d in theirs.deletions] == [("low-0", 45)]
    assert theirs.status is not None
    assert theirs.status.placement is not None and theirs.status.placement.workers == []
    assert theirs.status.restarts == 0 and theirs.status.phase is JobPhase.PENDING
    preempted = next(c for c in theirs.status.conditions if c.type == PREEMPTED)
    assert preempted.status == "True" and "default/high (priority 1000)" in preempted.message
    assert theirs.status.preemption is not None and theirs.status.preemption.preempted_by == ["default/high"]
    assert [e.reason for e in theirs.events] == ["Preempted"]
    assert [(e.victim, e.source) for e in result.preempted] == [(LOW, "trainingjob")]
    assert result.preempted[0].gpu_hours_lost == pytest.approx(8 * 1001 / 3600)


def test_the_work_lost_counts_from_the_declared_checkpoint() -> None:
    low, pods = low_running()
    low = replace(low, checkpoint_time=at(901.0))
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    result = step([low, high], pods, view(*pods), now=1001.0)
    assert result.preempted[0].gpu_hours_lost == pytest.approx(8 * 100 / 3600)


def test_the_preemptor_is_placed_once_the_victim_is_gone_and_its_nomination_cleared() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    low = read_back(low, step([low, high], pods, view(*pods), now=1001.0))
    result = step([low, high], [], view(), now=1040.0)
    mine = actions_of(result, "high")
    assert mine.status is not None and mine.status.placement is not None
    assert [w.node for w in mine.status.placement.workers] == ["n0"]
    assert mine.status.nomination is None
    assert HIGH not in result.nominated


def test_a_nomination_holds_its_gpus_against_a_backfill_arrival() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    low = read_back(low, step([low, high], pods, view(*pods), now=1001.0))
    backfill = tj("backfill", "research", gpus=1)
    # The preemptor's writes are still going out: it is not stepped, but its nomination holds.
    result = step([low, high, backfill], [], view(), now=1040.0, busy=[HIGH])
    assert not any(a.job[1] == "backfill" and a.pods for a in result.actions)
    mine = actions_of(result, "backfill")
    assert mine.status is not None
    assert next(c for c in mine.status.conditions if c.type == PLACED).status == "False"


def test_a_nomination_decided_but_not_read_back_holds_from_memory() -> None:
    low, pods = low_running()
    first = step([low, tj("high", "prod")], pods, view(*pods))
    backfill = tj("backfill", "research", gpus=1)
    result = step([low, tj("high", "prod"), backfill], [], view(), now=1001.0, busy=[HIGH], nominated=first.nominated)
    assert not any(a.job[1] == "backfill" and a.pods for a in result.actions)
    assert HIGH in result.nominated  # still carried: its status is not read back yet


def test_a_nomination_only_in_memory_ends_nobody() -> None:
    """An operator killed after deciding, before the nomination was written, has ended no victim: the next
    operator decides afresh from what the cluster shows."""
    low, pods = low_running()
    first = step([low, tj("high", "prod")], pods, view(*pods))
    result = step([low, tj("high", "prod")], pods, view(*pods), now=1001.0, busy=[HIGH], nominated=first.nominated)
    assert not any(a.job == LOW and a.deletions for a in result.actions)


def test_equal_priority_never_preempts() -> None:
    low, pods = low_running()
    result = step([low, tj("peer", "research")], pods, view(*pods))
    assert result.nominated == {}
    assert all(a.status is None or a.status.nomination is None for a in result.actions)


def test_preemption_policy_never_waits() -> None:
    low, pods = low_running()
    result = step([low, tj("high", "urgent-never")], pods, view(*pods))
    assert result.nominated == {}


PROTECTING = [
    # (case, the victim's class, its spec, the cluster's longest minimum runtime, whether it is preempted)
    ("its-class-protects-it", "sheltered", {}, 3600.0, False),
    ("its-own-word-does-not", "research", {"preemption": {"preemptible": False}}, 3600.0, True),
    ("within-its-minimum-runtime", "research", {"preemption": {"minRuntimeSeconds": 3600}}, 3600.0, False),
    ("its-minimum-runtime-past-the-clusters", "research", {"preemption": {"minRuntimeSeconds": 3600}}, 600.0, True),
]


@pytest.mark.parametrize(("case", "cls", "spec", "longest", "preempted"), PROTECTING, ids=[c[0] for c in PROTECTING])
def test_only_a_class_protects_a_job_and_its_minimum_runtime_is_bounded(
    case: str, cls: str, spec: dict[str, object], longest: float, preempted: bool
) -> None:
    """The job has run 1000 s. Its PriorityClass's gputopo.io/preemptible "false" keeps it; its own
    spec.preemption.preemptible does not, and its minimum runtime counts up to the cluster's longest."""
    status = running(placed([("n0", list(range(8)))]))
    status.conditions = []
    low = tj("low", cls, status, **spec)
    pods = [pod(low, 0, node="n0", gpus=tuple(range(8)), phase="Running")]
    settings = replace(SETTINGS, max_min_runtime_seconds=longest)
    result = step([low, tj("high", "prod")], pods, view(*pods), settings=settings)
    assert (HIGH in result.nominated) is preempted


def test_a_job_preempted_recently_is_protected() -> None:
    status = running(placed([("n0", list(range(8)))]))
    status.conditions = []
    status.preemption = {"count": 1, "lastPreemptedAt": at(900).isoformat(), "preemptedBy": ["default/other"]}  # type: ignore[assignment]
    low = tj("low", "research", TrainingJobStatus.model_validate(status.model_dump(by_alias=True)))
    pods = [pod(low, 0, node="n0", gpus=tuple(range(8)), phase="Running")]
    assert step([low, tj("high", "prod")], pods, view(*pods)).nominated == {}
    assert step([low, tj("high", "prod")], pods, view(*pods), now=1300.0).nominated != {}


def test_a_job_preempted_lately_waits_rather_than_preempt_in_turn() -> None:
    """The would-be preemptor was itself preempted 100 s ago (protection 300 s): it preempts nobody until then."""
    low, pods = low_running()
    lately = {"preemption": {"count": 1, "lastPreemptedAt": at(900).isoformat(), "preemptedBy": ["default/top"]}}
    high = replace(tj("high", "prod"), status=TrainingJobStatus.model_validate(lately))
    assert step([low, high], pods, view(*pods)).nominated == {}
    assert HIGH in step([low, high], pods, view(*pods), now=1300.0).nominated


def test_a_gang_never_preempts_one_that_preempted_it() -> None:
    low, pods = low_running()
    high = tj("high", "prod")
    high = replace(high, status=TrainingJobStatus.model_validate({"preemption": {"preemptedBy": ["default/low"]}}))
    assert step([low, high], pods, view(*pods)).nominated == {}


def _two_halves() -> tuple[list[JobFacts], list[PodFacts]]:
    """Two four-GPU research jobs sharing n0: an eight-GPU preemptor needs both gone."""
    jobs, pods = [], []
    for name, gpus in (("low-a", [0, 1, 2, 3]), ("low-b", [4, 5, 6, 7])):
        status = running(placed([("n0", gpus)]))
        status.conditions = []
        low = tj(name, "research", status, gpus=4)
        jobs.append(low)
        pods.append(pod(low, 0, node="n0", gpus=tuple(gpus), phase="Running"))
    return jobs, pods


@pytest.mark.parametrize(("per_gang", "nominated"), [(2, True), (1, False)])
def test_the_passs_first_preemptor_may_take_more_victims_than_the_pass_budget(per_gang: int, nominated: bool) -> None:
    """A pass budget of one victim: the first preemptor still ends the two gangs it needs, up to its own bound."""
    lows, pods = _two_halves()
    settings = PreemptionSettings(max_victims_per_pass=1, max_victims_per_gang=per_gang)
    result = step([*lows, tj("high", "prod")], pods, view(*pods), settings=settings)
    assert (HIGH in result.nominated) is nominated
    if nominated:
        mine = actions_of(result, "high")
        assert mine.status is not None and mine.status.nomination is not None
        assert mine.status.nomination.victims == ["default/low-a", "default/low-b"]


def test_without_preemption_nothing_is_nominated() -> None:
    low, pods = low_running()
    assert step([low, tj("high", "prod")], pods, view(*pods), settings=None).nominated == {}


def test_a_nomination_lapses_when_its_node_is_cordoned() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    low = read_back(low, step([low, high], pods, view(*pods), now=1001.0))
    result = step([low, high], [], view(cordon="n0"), now=1040.0)
    mine = actions_of(result, "high")
    assert mine.status is not None and mine.status.nomination is None
    assert any(e.reason == "NominationLapsed" for e in mine.events)


def test_priority_comes_from_the_class_or_the_global_default_and_the_deprecated_field_only_lowers_it() -> None:
    """spec.priority needs no PriorityClass: it may yield below what the cluster grants, never rise above it."""
    low, pods = low_running()
    assert step([low, job("old", priority=500, status=None)], pods, view(*pods)).nominated == {}
    default = {**CLASSES, "default": PriorityClassFacts("default", 2000, global_default=True)}
    v = replace(view(*pods), priority_classes=default)
    assert step([low, job("plain", priority=None)], pods, v).nominated != {}
    assert step([low, job("yields", priority=50)], pods, v).nominated == {}


def test_an_unknown_priority_class_makes_the_job_invalid_naming_the_field() -> None:
    result = step([tj("high", "gold")], [], view())
    mine = actions_of(result, "high")
    assert mine.status is not None
    invalid = next(c for c in mine.status.conditions if c.type == INVALID)
    assert invalid.status == "True" and "spec.priorityClassName: no PriorityClass named 'gold'" in invalid.message


# -- foreign gangs ----------------------------------------------------------------------------------------------


def _running_gang(priority: int) -> tuple[Gang, GangRecord]:
    record = recorded(run_gangs([foreign_gang(member(0))], two_nodes()))
    members = [member(r, gates=(), node=record.plan[r].node, phase="Running") for r in (0, 1)]
    return foreign_gang(*members, priority=priority), record


def _gang_input(
    g: Gang, record: GangRecord | None, planner: GangPlanner = gang_planner, **annotations: str
) -> GangInput:
    bodies = {m.uid: member_body(m) for m in g.members}
    for b in bodies.values():
        b["metadata"]["annotations"] = annotations
    records = {KEY: record} if record is not None else {}
    return GangInput({KEY: g}, records, bodies, planner, requester=lambda gang: preemptor_shapes(gang, DEFAULT_TIERS))


def two_node_view() -> ClusterView:
    return replace(two_nodes(), priority_classes=CLASSES)


def test_a_foreign_gang_victim_is_evicted_whole_and_waits_preempted() -> None:
    g, record = _running_gang(priority=10)
    big = tj("high", "prod", workers=2)
    first = step([big], [], two_node_view(), gangs=_gang_input(g, record))
    high = read_back(big, first)
    assert high.status.nomination is not None and high.status.nomination.victims == ["uid:rec-uid"]
    result = step([high], [], two_node_view(), now=1001.0, gangs=_gang_input(g, record))
    evicted = next(a for a in result.gang_actions if a.key == KEY)
    assert sorted(e.name for e in evicted.evictions) == ["train-0-x0", "train-1-x1"]
    after = recorded(result)
    assert after.phase == "Preempted" and after.ranks == () and after.restarts == 0
    assert after.preemption is not None and after.preemption.preempted_by == ["uid:uid-high"]
    assert any(e.reason == "GangPreempted" for _, e in evicted.events)
    assert [(e.victim, e.source) for e in result.preempted] == [(KEY, "job")]


def test_a_bare_pod_gang_is_no_victim() -> None:
    g, record = _running_gang(priority=10)
    bare = replace(g, owner=None)
    result = step([tj("high", "prod", workers=2)], [], two_node_view(), gangs=_gang_input(bare, record))
    assert result.nominated == {}


GANG_PROTECTING = [
    # (case, the pods' annotations, the pods' PriorityClass, whether the gang is preempted)
    ("its-pods-say-non-preemptible", {"gputopo.io/preemptible": "false"}, None, True),
    ("its-pods-claim-a-minimum-runtime-for-ever", {"gputopo.io/min-runtime-seconds": "inf"}, None, True),
    ("its-pods-claim-a-minimum-runtime-of-nan", {"gputopo.io/min-runtime-seconds": "nan"}, None, True),
    ("its-class-protects-it", {}, "sheltered-low", False),
]


@pytest.mark.parametrize(("case", "notes", "cls", "preempted"), GANG_PROTECTING, ids=[c[0] for c in GANG_PROTECTING])
def test_a_foreign_gangs_pods_cannot_opt_out_of_preemption(
    case: str, notes: dict[str, str], cls: str | None, preempted: bool
) -> None:
    """The gang was planned at 0 and has run 1000 s; the cluster's longest minimum runtime is 600 s."""
    g, record = _running_gang(priority=10)
    given = _gang_input(g, record, **notes)
    if cls is not None:
        for b in given.bodies.values():
            b["spec"]["priorityClassName"] = cls
    settings = replace(SETTINGS, max_min_runtime_seconds=600.0)
    result = step([tj("high", "prod", workers=2)], [], two_node_view(), gangs=given, settings=settings)
    assert (HIGH in result.nominated) is preempted


def _low_on_two_nodes() -> tuple[JobFacts, list[PodFacts], ClusterView]:
    """A research TrainingJob running on both 8-GPU nodes of a two-node cluster: its pods, and the view."""
    status = running(placed([("n0", list(range(8))), ("n1", list(range(8)))]))
    status.conditions = []
    low = tj("low", "research", status, workers=2)
    pods = [pod(low, r, node=f"n{r}", gpus=tuple(range(8)), phase="Running") for r in (0, 1)]
    v = replace(cluster().node("n0").node("n1", leaf="leaf-a").with_pods(*pods).view(), priority_classes=CLASSES)
    return low, pods, v


def test_a_foreign_gang_preempts_a_lower_priority_training_job() -> None:
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1), priority=1000, owner=OWNER)
    result = step([low], pods, v, gangs=_gang_input(pending, None))
    after = recorded(result)
    assert after.nomination is not None and after.nomination.victims == ["uid:uid-low"]
    assert any(e.reason == "Preempting" for _, e in next(a for a in result.gang_actions if a.key == KEY).events)


def test_a_gang_whose_pods_say_never_does_not_preempt() -> None:
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1), priority=1000, owner=OWNER)
    given = _gang_input(pending, None)
    for b in given.bodies.values():
        b["spec"]["preemptionPolicy"] = "Never"
    assert step([low], pods, v, gangs=given).nominated == {}


def test_status_round_trip_keeps_the_preemption_fields() -> None:
    written = TrainingJobStatus.model_validate(
        {
            "nomination": {"gpus": [{"node": "n0", "gpus": [0, 1]}], "victims": ["a/b"], "domain": "n0"},
            "preemption": {"count": 2, "lastPreemptedAt": T0.isoformat(), "preemptedBy": ["a/c"]},
        }
    )
    again = TrainingJobStatus.model_validate(written.model_dump(by_alias=True, mode="json"))
    assert again == written


def test_while_its_victims_terminate_the_preemptor_says_so_and_stays_quiet() -> None:
    low, pods = low_running()
    high = read_back(tj("high", "prod"), step([low, tj("high", "prod")], pods, view(*pods)))
    low = read_back(low, step([low, high], pods, view(*pods), now=1001.0))
    terminating = [replace(p, deleting=True) for p in pods]
    result = step([low, high], terminating, view(*terminating), now=1002.0)
    mine = next((a for a in result.actions if a.job == HIGH), None)
    status = mine.status if mine is not None and mine.status is not None else high.status
    placed_ = next(c for c in status.conditions if c.type == PLACED)
    assert placed_.reason == "Preempting" and placed_.message.startswith("waiting for default/low to end")
    assert mine is None or not mine.events
    assert status.nomination is not None


def test_a_gang_preemptor_whose_victims_still_run_waits_pending_and_quiet() -> None:
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1), priority=1000, owner=OWNER)
    first = recorded(step([low], pods, v, gangs=_gang_input(pending, None)))
    # The nomination is read back; its victim's pods have not ended yet.
    terminating = [replace(p, deleting=True) for p in pods]
    v = replace(v, pods=tuple(terminating))
    result = step([low], terminating, v, now=1001.0, gangs=_gang_input(pending, first, _plan_gang))
    after = recorded(result)
    assert after.phase == "Pending" and after.message.startswith("waiting for uid:uid-low to end")
    assert after.nomination == first.nomination
    assert not [
        e for _, e in next(a for a in result.gang_actions if a.key == KEY).events if e.reason == "GangUnplaceable"
    ]


def _plan_gang(snapshot: Snapshot, gang: Gang) -> Placement | Unplaceable:
    """The operator's planner: every GPU shape of the gang placed in turn."""
    plan = plan_gang(snapshot, gang, DEFAULT_TIERS, place)
    return plan if isinstance(plan, Unplaceable) else plan.placement


def through_the_nomination(
    low: JobFacts, pods: list[PodFacts], v: ClusterView, pending: Gang
) -> tuple[GangRecord, GangRecord]:
    """The pending gang preempts the research job ``low`` (its one victim) and is nominated; a pass while the victim's
    pods terminate keeps the nomination; once they are gone it is planned. Its first record and its planned one."""
    first = recorded(step([low], pods, v, gangs=_gang_input(pending, None, _plan_gang)))
    assert first.nomination is not None and first.nomination.victims == ["uid:uid-low"]
    terminating = [replace(p, deleting=True) for p in pods]
    waiting = recorded(
        step(
            [low],
            terminating,
            replace(v, pods=tuple(terminating)),
            now=1001.0,
            gangs=_gang_input(pending, first, _plan_gang),
        )
    )
    assert waiting.phase == "Pending" and waiting.nomination == first.nomination
    gone = replace(v, pods=())
    after = recorded(step([], [], gone, now=1002.0, gangs=_gang_input(pending, waiting, _plan_gang)))
    assert after.phase == "Planned" and after.nomination is None
    return first, after


def test_a_foreign_gang_of_two_gpu_shapes_preempts_and_is_placed_on_its_nomination() -> None:
    """An 8-GPU rank and a 4-GPU rank: it preempts the research job, its nomination (12 GPUs) holds while the
    victim's pods end (it is checked by the gang's planner, not as two 8-GPU ranks), and once they are gone each
    rank is planned on the nominated GPUs with its own shape."""
    low, pods, v = _low_on_two_nodes()
    pending = foreign_gang(member(0), member(1, gpus=4), shape=(8, 4), priority=1000, owner=OWNER)
    first, after = through_the_nomination(low, pods, v, pending)
    assert first.nomination is not None
    nominated = {(e.node, g) for e in first.nomination.gpus for g in e.gpus}
    assert len(nominated) == 12
    assert [(p.rank, len(p.gpus)) for p in after.ranks] == [(0, 8), (1, 4)]
    assert {(p.node, g) for p in after.ranks for g in p.gpus} == nominated
