"""Foreign gangs' reports held while new plans' writes go out: up to the jobs' report delay, never a plan, a pod's
patch, an eviction or a record's deletion."""

from __future__ import annotations

from typing import Any

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import Eviction, GangActions, PodPatch, RecordDeletion
from gputopo.control.gangreports import HeldReports
from gputopo.control.memory import REPORT_DELAY_SECONDS

RUNNING = {"phase": "Running"}


def gang(name: str, **kw: Any) -> GangActions:
    return GangActions(JobKey(("team", f"podgroup/{name}")), "team", f"podgroup-{name}", **kw)


def test_a_report_waits_while_plans_go_out_and_goes_once_due() -> None:
    held = HeldReports()
    report = gang("a", status=RUNNING)
    assert held.sort([report], placing=True, tick=100.0) == ([], REPORT_DELAY_SECONDS)
    assert held.sort([report], placing=True, tick=102.0) == ([], REPORT_DELAY_SECONDS - 2.0)  # held from the first
    assert held.sort([report], placing=True, tick=100.0 + REPORT_DELAY_SECONDS) == ([report], None)
    assert held.since == {}


def test_a_report_goes_at_once_when_no_plan_goes_out() -> None:
    held = HeldReports()
    report = gang("a", status=RUNNING)
    held.sort([report], placing=True, tick=100.0)
    assert held.sort([report], placing=False, tick=101.0) == ([report], None)


def test_plans_patches_evictions_and_deletions_are_never_held() -> None:
    patch = PodPatch("a-0", "uid-0", ({"op": "remove", "path": "/spec/schedulingGates/0"},))
    acting = [
        gang("plan", status=RUNNING, placed=True),  # a plan whose pods come later only records
        gang("steer", patches=[patch]),
        gang("evict", evictions=[Eviction("b-0", "uid-1")]),
        gang("delete", deletion=RecordDeletion("rec-uid")),
    ]
    assert HeldReports().sort(acting, placing=True, tick=0.0) == (acting, None)


def test_a_gang_with_nothing_more_to_report_is_forgotten() -> None:
    held = HeldReports()
    held.sort([gang("a", status=RUNNING), gang("b", status=RUNNING)], placing=True, tick=0.0)
    start, due = held.sort([gang("b", status=RUNNING)], placing=True, tick=1.0)
    assert start == [] and due == REPORT_DELAY_SECONDS - 1.0
    assert list(held.since) == [JobKey(("team", "podgroup/b"))]
