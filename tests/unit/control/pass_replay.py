"""Random control passes, run through the operator's decisions the way its runtime runs them.

A scenario (one seed) is a random cluster of GPU nodes and TrainingJobs, stepped through several passes. Between
passes the world moves on from what the passes decided: the writes they asked for succeed, fail, are refused or
stay in flight; pods are bound, run, fail, finish; links, GPUs and nodes fail and come back; time goes by. Each
pass runs the pure pass and the runtime's decisions around it (which jobs are busy, the nodes avoided, refusals,
reports held back, retry backoff, the urgency of a job event, node turns given up), and yields a digest of every
decision made.

The same driver runs against the operator as it was at f5ae149 (its 18-parameter ``run_pass`` and, for the
runtime's decisions, a copy of the parallel dicts its ``Runtime`` kept: ``replay_decisions``) and against the
operator now (``PassInput`` and ``control.memory``). The digests of the old code are recorded in
``fixtures/passes_f5ae149.json``; ``test_old_against_new`` replays the seeds with the new code. The record is
taken on fd6ad62: f5ae149's operator with the Grace estimator, which gives a worker every equidistant compute
rail (its digests differ from f5ae149's alone in 96 of the 600 passes), and with the placement engine's tie-break
between node classes of equal bus bandwidth (best fit, then the smaller free NVLink domain broken: ``_cut`` and
``NodeScores.broken``/``domain`` of ee4235a put into fd6ad62's ``placement/engine.py`` and ``scores.py``; 16 passes
differ). To record again:

    mkdir -p /tmp/old && git archive fd6ad62 operator node-probe | tar -x -C /tmp/old
    # then the tie-break of ee4235a into /tmp/old/operator/gputopo/placement/{engine,scores}.py
    PYTHONPATH=/tmp/old/operator:/tmp/old/node-probe python3 tests/unit/control/pass_replay.py \
        --record tests/unit/control/fixtures/passes_f5ae149.json
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from control_builders import T0, cluster, job
from replay_decisions import Before, NewDecisions, OldDecisions, Token

from gputopo.api.nodetopology import GpuHealthState, LinkState
from gputopo.control import reconcile
from gputopo.control.actions import JobActions
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import JobFacts, JobKey, NodeFacts, PodFacts, TopologyFacts, pod_facts
from gputopo.control.ledger import Ledger, PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.priority import PriorityClassFacts
from gputopo.control.quarantine import Quarantine
from gputopo.control.view import ClusterView
from gputopo.placement import DEFAULT_TIERS, place
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import Placement as EnginePlacement
from gputopo.topology.model import Topology

NEW = hasattr(reconcile, "PassInput")
SEEDS = range(120)
PASSES = 5  # per seed: 600 passes in all
NODE_TYPES = ("hgx-h100", "h100-nvl-pairs", "dgx-a100", "rtx4090-pcie", "dgx1-v100")

# f5ae149 took a job's deprecated spec.priority as it was; now it may only lower the priority the cluster grants a job
# that names no class. A globalDefault class above every job's spec.priority grants what f5ae149 took.
GRANTING = {"replay-default": PriorityClassFacts("replay-default", 1_000_000_000, global_default=True)}


# -- the world --------------------------------------------------------------------------------------------------


@dataclass
class World:
    rng: random.Random
    topologies: dict[str, Topology]
    nodes: dict[str, NodeFacts]
    jobs: dict[JobKey, JobFacts]
    pods: dict[str, PodFacts] = field(default_factory=dict)  # by name (one namespace)
    foreign: list[PodFacts] = field(default_factory=list)
    readings: list[tuple[str, Topology]] = field(default_factory=list)
    unseen: list[PodFacts] = field(default_factory=list)  # created, not yet shown by the watch
    seconds: float = 10.0

    @property
    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)

    def view(self) -> ClusterView:
        return ClusterView(
            topologies={n: TopologyFacts(n, t) for n, t in self.topologies.items()},
            nodes=dict(self.nodes),
            pods=tuple(p for p in [*self.pods.values(), *self.foreign] if p.node and p.holds_gpus),
            priority_classes=GRANTING,
        )

    def job_pods(self) -> dict[JobKey, list[PodFacts]]:
        by_job: dict[JobKey, list[PodFacts]] = {}
        for p in self.pods.values():
            if p.job is not None:
                by_job.setdefault(JobKey((p.namespace, p.job)), []).append(p)
        return by_job


def new_world(seed: int) -> tuple[World, Config, bool, int | None]:
    rng = random.Random(seed)
    builder = cluster()
    for i in range(rng.randint(1, 5)):
        builder.node(f"n{i}", rng.choice(NODE_TYPES), leaf=rng.choice(("leaf-a", "leaf-b")))
    jobs: dict[JobKey, JobFacts] = {}
    for i in range(rng.randint(1, 7)):
        spec: dict[str, Any] = {
            "topology": {"intraNode": rng.choice(("any", "any", "nvlink", "nvswitch"))},
            "failurePolicy": {
                "onLinkFailure": rng.choice(("Reschedule", "Reschedule", "Tolerate")),
                "maxRestarts": rng.randint(0, 3),
                "backoffSeconds": rng.choice((0, 0, 10, 30)),
                "gracePeriodSeconds": rng.choice((0, 30)),
            },
        }
        if rng.random() < 0.2:
            spec["runPolicy"] = {"activeDeadlineSeconds": rng.choice((60, 300)), "ttlSecondsAfterFinished": 30}
        facts = job(
            f"j{i}",
            workers=rng.choice((1, 1, 2, 3)),
            gpus=rng.choice((1, 2, 4, 8, 8, 3)),
            priority=rng.randint(0, 2),
            created=float(rng.randint(0, 5)),
            **spec,
        )
        jobs[facts.key] = facts
    view = builder.view()
    topologies = {n: f.topology for n, f in view.topologies.items() if f.topology is not None}
    world = World(rng, topologies, dict(view.nodes), jobs)
    if rng.random() < 0.3:
        node = rng.choice(sorted(topologies))
        world.foreign.append(PodFacts("other", "squatter", node=node, gpus_requested=2, phase="Running"))
    mode = GpuAllocation.DRA if rng.random() < 0.25 else GpuAllocation.DEVICE_PLUGIN
    config = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30, gpu_allocation=mode)
    quarantine = rng.random() < 0.7
    limit = rng.choice((None, None, 1, 2))
    return world, config, quarantine, limit


def move_on(world: World) -> None:
    """Time passes; hardware and pods change."""
    rng = world.rng
    world.seconds += rng.choice((1.0, 4.0, 8.0, 12.0, 20.0, 45.0, 90.0))
    for p in list(world.unseen):
        if rng.random() < 0.5:
            world.pods.setdefault(p.name, p)
            world.unseen.remove(p)
    for name in sorted(world.topologies):
        t = world.topologies[name]
        roll = rng.random()
        if roll < 0.12 and t.links:
            a, b = rng.choice(sorted(t.links))
            state = LinkState.DOWN if t.links[(a, b)].state is LinkState.UP else LinkState.UP
            world.topologies[name] = t.with_link_state(a, b, state)
        elif roll < 0.2 and t.links:  # a flap: down and up again between two passes
            a, b = rng.choice(sorted(t.links))
            world.readings.append((name, t.with_link_state(a, b, LinkState.DOWN)))
            world.topologies[name] = t.with_link_state(a, b, LinkState.DOWN).with_link_state(
                a, b, t.links[(a, b)].state
            )
        elif roll < 0.24:
            world.topologies[name] = t.with_gpu_health(rng.randrange(t.gpu_count), GpuHealthState.UNHEALTHY, "XID 79")
        if world.topologies[name] is not t:
            world.readings.append((name, world.topologies[name]))
        if rng.random() < 0.05:
            node = world.nodes[name]
            world.nodes[name] = replace(node, ready=not node.ready, ready_since=world.now)
    for name, p in sorted(world.pods.items()):
        roll = rng.random()
        if p.deleting:
            if roll < 0.6:
                del world.pods[name]
            continue
        if not p.node:
            node = _planned_node(world, p)
            if node is not None and roll < 0.6:
                world.pods[name] = replace(
                    p, node=node, scheduled_at=world.now, phase=rng.choice(("Pending", "Running"))
                )
            elif roll < 0.75:
                world.pods[name] = _refused(p, world.now)
        elif p.phase == "Pending" and roll < 0.7:
            world.pods[name] = replace(p, phase="Running")
        elif p.phase == "Running" and roll < 0.04:
            world.pods[name] = replace(p, phase="Failed")
        elif p.phase == "Running" and roll < 0.10:
            world.pods[name] = replace(p, phase="Succeeded")


def _refused(p: PodFacts, now: datetime) -> PodFacts:
    """The pod as kube-scheduler leaves it when it finds it unschedulable (since ``now``, unless it already was):
    a ``Refusal`` in the operator now, ``unschedulable_since`` in f5ae149's."""
    if not hasattr(p, "refusal"):
        return replace(p, unschedulable_since=getattr(p, "unschedulable_since", None) or now)
    from gputopo.gangs.unbound import UNSCHEDULABLE, Refusal  # not in f5ae149's operator

    return replace(p, refusal=p.refusal or Refusal(UNSCHEDULABLE, "", now))


def _planned_node(world: World, p: PodFacts) -> str | None:
    facts = world.jobs.get(JobKey((p.namespace, str(p.job))))
    placement = facts.status.placement if facts is not None else None
    if placement is None:
        return None
    return next((w.node for w in placement.workers if w.rank == p.rank), None)


def carry_out(world: World, a: JobActions, outcome: str) -> None:
    """What the API server's state becomes after one job's writes."""
    facts = world.jobs.get(a.job)
    if facts is None or outcome == "status-error":
        return
    if a.status is not None:
        world.jobs[a.job] = facts = replace(facts, status=a.status)
    for d in a.deletions:
        p = world.pods.get(d.name)
        if p is not None:
            world.pods[d.name] = replace(p, deleting=True)
    if outcome == "refused":
        return
    late = world.rng.random() < 0.3
    for body in a.pods:
        p = pod_facts(body)
        if late:
            world.unseen.append(p)
        elif p.name not in world.pods:
            world.pods[p.name] = p
    if a.delete_job:
        del world.jobs[a.job]


# -- digests ----------------------------------------------------------------------------------------------------


def _actions(a: JobActions) -> dict[str, Any]:
    for legacy in ("ungate", "ungate_once_created"):
        assert not getattr(a, legacy, None), "no pod is gated: nothing to lift"
    return {
        "job": list(a.job),
        "uid": a.uid,
        "status": a.status.model_dump(mode="json", by_alias=True, exclude_none=True) if a.status else None,
        "deletions": [[d.name, d.grace_seconds] for d in a.deletions],
        "service": a.service,
        "claims": a.claims,
        "claim_deletions": a.claim_deletions,
        "pods": a.pods,
        "events": [[e.type, e.reason, e.message] for e in a.events],
        "delete_job": a.delete_job,
    }


def _plan(p: PlannedGang) -> list[Any]:
    return [list(p.job), p.generation, [[n, list(g)] for n, g in p.workers], str(p.planned_at)]


def _result(result: Any, handed: list[tuple[JobActions, PlannedGang]]) -> dict[str, Any]:
    return {
        "handed": [[_actions(a), _plan(p)] for a, p in handed],
        "actions": [_actions(a) for a in result.actions],
        "reservations": [_plan(p) for p in result.reservations],
        "outcomes": [
            [
                list(o.queued.key),
                o.result.to_api(generation=1).model_dump(mode="json", by_alias=True)
                if isinstance(o.result, EnginePlacement)
                else str(o.result),
            ]
            for o in result.outcomes
        ],
        "avoid": sorted([list(k), sorted(v)] for k, v in result.avoid.items()),
        "restarts": result.restarts,
        "phases": sorted(result.phases.items()),
        "queue_length": result.queue_length,
        "wake_at": str(result.wake_at),
        "visible": sorted([list(k), v] for k, v in result.visible.items()),
        "warmed": result.warmed,
    }


def _digest(record: Any) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- one scenario -----------------------------------------------------------------------------------------------


def run_pass(
    world: World,
    config: Config,
    quarantine: Quarantine | None,
    limit: int | None,
    ledger: Ledger,
    busy: set[JobKey],
    avoid: Mapping[JobKey, frozenset[str]],
    refused: Mapping[JobKey, str],
    cache: PlacementCache,
) -> tuple[Any, list[tuple[JobActions, PlannedGang]]]:
    handed: list[tuple[JobActions, PlannedGang]] = []

    def placed(a: JobActions, plan: PlannedGang) -> None:
        ledger.reserve(plan)
        handed.append((a, plan))

    jobs, job_pods, view, now = dict(world.jobs), world.job_pods(), world.view(), world.now
    readings, world.readings = world.readings, []
    if NEW:
        ledgered = list(ledger)
        facts = reconcile.PassInput(
            jobs, job_pods, view, now, ledgered, avoid, refused, busy, quarantine, readings, cache
        )
        from gputopo.control.queue import Limits

        # never_fits off: f5ae149 let a job that fits no cluster head its queue, and said so in other words.
        limits = Limits(300.0, placements=limit, never_fits=False)
        rules = reconcile.PassRules(config, place, limits, restarts_first=True)
        return reconcile.run_pass(facts, rules, placed), handed
    if quarantine is not None:
        for node, topology in readings:  # at f5ae149 the watch observed each reading as it came
            quarantine.observe(node, topology, now)
    result = reconcile.run_pass(  # type: ignore[call-arg]
        jobs,
        job_pods,
        view,
        list(ledger),
        avoid,
        config,
        now,
        place,
        quarantine,
        300.0,
        None,
        restarts_first=True,
        refused=refused,
        placements_per_pass=limit,
        busy=busy,
        on_placed=placed,
        cache=cache,
    )
    return result, handed


def scenario(seed: int) -> Iterator[str]:
    """The digest of each pass of one seed's scenario."""
    world, config, quarantined, limit = new_world(seed)
    rng = world.rng
    decisions: OldDecisions | NewDecisions = NewDecisions() if NEW else OldDecisions()
    quarantine = Quarantine(60.0) if quarantined else None
    ledger = Ledger()
    cache = PlacementCache()
    in_flight: list[tuple[JobActions, JobFacts, PlannedGang | None, str]] = []
    for _ in range(PASSES):
        record: dict[str, Any] = {}
        record["urgent"] = [decisions.indexed(j) for _, j in sorted(world.jobs.items())]
        released = []
        for _, p in sorted(world.pods.items()):
            token = decisions.pod_bound(p)
            if isinstance(token, Token):
                released.append(token.name)
        record["released"] = released
        clock = world.seconds
        writing = {a.job for a, _, _, _ in in_flight}
        busy, avoid, refused = decisions.before_pass(Before(world.jobs, world.job_pods(), writing, world.now, clock))
        record["busy"] = sorted(map(list, busy))
        record["avoid"] = sorted([list(k), sorted(v)] for k, v in avoid.items())
        record["refused"] = sorted([list(k), v] for k, v in refused.items())
        result, handed = run_pass(world, config, quarantine, limit, ledger, busy, avoid, refused, cache)
        record["pass"] = _result(result, handed)
        ledger.prune(result.visible)
        decisions.after_pass(result.avoid, world.now, timedelta(seconds=2 * config.unschedulable_timeout))
        placing = bool(handed) or any(plan is not None for _, _, plan, _ in in_flight)
        start, due = decisions.hold_reports(result.actions, placing, writing, clock)
        record["started"] = [list(a.job) for a in start]
        record["due"] = None if due is None else round(due, 6)
        # The writes of this pass and of the last one's in flight: done now, or still going out.
        writes = [(a, world.jobs[a.job], plan) for a, plan in handed] + [(a, world.jobs[a.job], None) for a in start]
        finished, in_flight = in_flight, []
        for a, facts, plan in writes:
            outcome = rng.choices(
                ("ok", "error", "status-error", "refused"), (80, 7, 6 if a.status else 0, 7 if a.pods else 0)
            )[0]
            if rng.random() < 0.1:
                in_flight.append((a, facts, plan, outcome))
            else:
                finished.append((a, facts, plan, outcome))
        delays = []
        for a, facts, plan, outcome in finished:
            delays.append(decisions.written(a, facts, plan, outcome, ledger, clock))
            carry_out(world, a, outcome)
            names = {str(body["metadata"]["name"]) for body in a.pods}
            if plan is not None and outcome == "ok" and names and config.gpu_allocation is GpuAllocation.DEVICE_PLUGIN:
                decisions.binds(a.job, Token(a.job[1]), plan.generation, names)
        record["delays"] = delays
        record["ledger"] = sorted(_plan(p) for p in ledger)
        yield _digest(record)
        move_on(world)


def digests(seeds: Sequence[int] = SEEDS) -> dict[str, list[str]]:
    return {str(seed): list(scenario(seed)) for seed in seeds}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--record":
        assert not NEW, "record with the operator of f5ae149 on PYTHONPATH"
        Path(sys.argv[2]).write_text(json.dumps(digests(), indent=0, sort_keys=True) + "\n")
    else:
        print(json.dumps(digests(), indent=0, sort_keys=True))
