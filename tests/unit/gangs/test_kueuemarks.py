"""Which pods Kueue's Topology-Aware Scheduling places (gputopo then plans none), as Kueue v0.17.0 marks them."""

from __future__ import annotations

import pytest
from gang_builders import job, job_pod, pod

from gputopo.gangs.claims import Owners
from gputopo.gangs.kueuemarks import (
    ADMISSION_GATE,
    PODSET_LABEL,
    TOPOLOGY_GATE,
    UNCONSTRAINED_TOPOLOGY,
    WORKLOAD_ANNOTATION,
    kueue_workload,
    placed_by_kueue,
)
from gputopo.gangs.model import GATE
from gputopo.gangs.read import read_gangs

REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def test_a_job_pod_admitted_on_a_tas_flavor_is_kueues_while_its_topology_gate_holds_it() -> None:
    body = (
        job_pod(job("tas", 2, 8), 0, 8)
        .gates(GATE, TOPOLOGY_GATE)
        .annotate(WORKLOAD_ANNOTATION, "job-tas-1a2b3")
        .annotate(REQUIRED, "gputopo.io/tier-0")
        .build()
    )
    assert placed_by_kueue(body)
    assert kueue_workload(body) == "job-tas-1a2b3"


@pytest.mark.parametrize("annotation", [REQUIRED, "kueue.x-k8s.io/podset-preferred-topology", UNCONSTRAINED_TOPOLOGY])
def test_once_kueue_lifted_its_topology_gate_its_annotations_still_say_tas(annotation: str) -> None:
    body = pod("w-0").gates(GATE).annotate(WORKLOAD_ANNOTATION, "wl").annotate(annotation, "true").build()
    assert placed_by_kueue(body)


def test_a_pod_admitted_on_a_flavor_without_topology_is_gputopos() -> None:
    body = pod("w-0").gates(GATE).annotate(WORKLOAD_ANNOTATION, "wl").label(PODSET_LABEL, "main").build()
    assert not placed_by_kueue(body)
    assert kueue_workload(body) == "wl"


def test_kueues_topology_annotation_without_a_kueue_workload_is_a_need_gputopo_places() -> None:
    body = pod("w-0").gates(GATE).annotate(REQUIRED, "gputopo.io/tier-0").build()
    assert not placed_by_kueue(body)
    assert kueue_workload(body) is None


def test_a_plain_pod_not_admitted_yet_is_undecided_though_it_carries_the_topology_gate() -> None:
    # Kueue's pod webhook gates every pod it manages with both gates; on admission without TAS both go at once.
    body = pod("p-0").gates(GATE, ADMISSION_GATE, TOPOLOGY_GATE).label("kueue.x-k8s.io/queue-name", "q").build()
    assert not placed_by_kueue(body)
    assert kueue_workload(body) is None


def test_a_podset_label_alone_marks_a_kueue_workload_of_no_name() -> None:
    assert kueue_workload(pod("p").label(PODSET_LABEL, "main").build()) == ""


def test_read_gangs_carries_the_marks_into_each_member() -> None:
    owner = job("tas", 2, 8)
    pods = [
        job_pod(owner, i, 8).gates(GATE, TOPOLOGY_GATE).annotate(WORKLOAD_ANNOTATION, "wl").build() for i in range(2)
    ]
    found = read_gangs(pods, Owners(jobs={("team-a", "tas"): owner}))
    (gang,) = found.gangs
    assert all(m.placed_by_kueue and m.kueue_workload == "wl" for m in gang.members)
    assert all(m.held_elsewhere == (TOPOLOGY_GATE,) for m in gang.members)
