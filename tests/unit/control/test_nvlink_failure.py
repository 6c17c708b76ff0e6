"""NVLink fabric faults on NVL72 racks: a degraded tray moves only the gangs on it; a fabric that goes down
across its domain moves every gang of the domain; Tolerate keeps a gang at the degraded figure."""

from __future__ import annotations

from control_builders import ClusterBuilder, at, cluster, job
from pass_builders import actions_of, gang, placed, run, running

from gputopo.api.nodetopology import FabricHealth
from gputopo.api.trainingjob import JobPhase
from gputopo.control.facts import JobFacts
from gputopo.control.failure import FaultKind, faults_under
from gputopo.control.quarantine import Quarantine
from gputopo.placement import Placement
from gputopo.topology.fabric import node_domain


def rack(trays: int = 6) -> ClusterBuilder:
    builder = cluster()
    for t in range(trays):
        builder.tray(f"t{t}", "rack-a")
    return builder


def two_gangs() -> tuple[JobFacts, Placement, JobFacts, Placement]:
    pa = placed([("t0", [0, 1, 2, 3]), ("t1", [0, 1, 2, 3])])
    pb = placed([("t2", [0, 1, 2, 3]), ("t3", [0, 1, 2, 3])])
    policy = {"backoffSeconds": 0}
    a = job("alpha", workers=2, gpus=4, failurePolicy=policy, status=running(pa))
    b = job("beta", workers=2, gpus=4, failurePolicy=policy, status=running(pb))
    return a, pa, b, pb


def test_a_degraded_tray_moves_only_the_gangs_on_it() -> None:
    a, pa, b, pb = two_gangs()
    view = rack().fabric("t1", "degraded").view()
    result = run([a, b], view, gang(a, pa) + gang(b, pb))
    alpha = actions_of(result, "alpha")
    assert alpha.status is not None and alpha.status.phase is JobPhase.RESCHEDULING
    assert any(e.reason == FaultKind.FABRIC_DEGRADED.value for e in alpha.events)
    assert all(a_.job[1] != "beta" for a_ in result.actions), "the other gang of the rack stays"
    new = alpha.status.placement
    assert new is not None and "t1" not in {w.node for w in new.workers}, "re-placed off the degraded tray"


def test_a_fabric_down_across_the_domain_moves_every_gang_of_it() -> None:
    a, pa, b, pb = two_gangs()
    builder = rack()
    for t in range(6):
        builder.fabric(f"t{t}", "down")
    result = run([a, b], builder.view(), gang(a, pa) + gang(b, pb))
    for name in ("alpha", "beta"):
        actions = actions_of(result, name)
        assert actions.status is not None and actions.status.restarts == 1
        assert any(e.reason == FaultKind.FABRIC_DOWN.value for e in actions.events)


def test_tolerate_keeps_the_gang_at_the_degraded_estimate() -> None:
    pa = placed([("t0", [0, 1, 2, 3]), ("t1", [0, 1, 2, 3])])
    a = job("alpha", workers=2, gpus=4, failurePolicy={"onLinkFailure": "Tolerate"}, status=running(pa))
    healthy = rack().view()
    degraded = rack().fabric("t0", "degraded").view()
    faults, _ = faults_under(pa.workers, degraded.topologies, degraded.nodes, at(10), 30)
    assert [f.kind for f in faults] == [FaultKind.FABRIC_DEGRADED]
    assert faults_under(pa.workers, healthy.topologies, healthy.nodes, at(10), 30)[0] == []
    result = run([a], degraded, gang(a, pa))
    actions = actions_of(result, "alpha")
    assert actions.status is not None and actions.status.phase is JobPhase.RUNNING
    assert not actions.deletions
    assert any("NVLink fabric bandwidth degraded" in e.message for e in actions.events)


def test_a_tray_whose_fabric_flapped_stays_out_of_new_plans_for_a_while() -> None:
    healthy = rack().view().topologies["t0"].topology
    degraded = rack().fabric("t0", "degraded").view().topologies["t0"].topology
    assert healthy is not None and degraded is not None
    quarantine = Quarantine(seconds=30)
    quarantine.observe("t0", degraded, at(0))
    quarantine.observe("t0", healthy, at(1))
    masked = quarantine.mask("t0", healthy, at(10))
    assert node_domain(masked).health is FabricHealth.DEGRADED, "a fabric seen degraded is avoided after it heals"
    assert quarantine.mask("t0", healthy, at(40)) is healthy
