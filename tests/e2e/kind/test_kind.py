"""End to end on kind: real kubelets, real containers, the chart as a user installs it.

The workers' GPUs are fake (the probe fakes NVML and registers a device plugin with each real kubelet), everything
else is real: the kubelets admit the pods and choose their GPUs, the pods resolve MASTER_ADDR through cluster DNS,
and the ranks (images/allreduce) rendezvous and all-reduce over the pod network.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from gputopo_cli import status_and_map
from kind_cluster import EVERY, FAULT_DIR, NS, RELEASE, ROOT, TAG, TIMINGS, TOPOLOGY_LABEL, Kind

from gputopo.api.group import ANNOTATION_PLACEMENT_GENERATION, LABEL_JOB, LABEL_RANK
from gputopo.sandbox.testing import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

JOBS_NS = "default"
OPERATOR = "app.kubernetes.io/component=operator"
PROBE = "app.kubernetes.io/component=probe"


def allreduce_job(name: str, workers: int, seconds: int) -> dict[str, Any]:
    """A gang of whole A100 nodes whose ranks check their network for ``seconds``."""
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {
            "workers": workers,
            "gpusPerWorker": 8,
            "topology": {"intraNode": "nvswitch"},
            "failurePolicy": {"onLinkFailure": "Reschedule", "maxRestarts": 3, "backoffSeconds": 1,
                              "gracePeriodSeconds": 1},
            "template": {"spec": {"containers": [{
                "name": "trainer",
                "image": f"gputopo-allreduce:{TAG}",
                "imagePullPolicy": "Never",
                "args": ["--seconds", str(seconds)],
                "ports": [{"name": "master", "containerPort": 29500}],
            }]}},
        },
    }  # fmt: skip


def apply(k: Kind, manifest: dict[str, Any]) -> float:
    """``kubectl apply`` of one object; the wall-clock time just before it."""
    t = time.time()
    k.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    return t


def status_of(k: Kind, job: str) -> dict[str, Any]:
    return dict(k.get("trainingjob", job, "-n", JOBS_NS).get("status") or {})


def phase(k: Kind, job: str, wanted: str) -> dict[str, Any] | None:
    status = status_of(k, job)
    if status.get("phase") == "Failed":
        raise AssertionError(f"{job} failed: {json.dumps(status)[:2000]}")
    return status if status.get("phase") == wanted else None


def events(k: Kind, pod: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [k.kubectl_bin, "--kubeconfig", str(k.kubeconfig), "logs", "-n", JOBS_NS, pod],
        capture_output=True,
        text=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def pods_of(k: Kind, job: str) -> list[dict[str, Any]]:
    return list(k.get("pods", "-n", JOBS_NS, "-l", f"{LABEL_JOB}={job}")["items"])


def rendezvoused(k: Kind, job: str, workers: int, not_uids: frozenset[str] = frozenset()) -> dict[int, Any] | None:
    """Rank -> (its rendezvous event, its pod) once every rank of pods not in ``not_uids`` has met the others."""
    pods = [
        p
        for p in pods_of(k, job)
        if p["metadata"]["uid"] not in not_uids and not p["metadata"].get("deletionTimestamp")
    ]
    if len(pods) != workers:
        return None
    met = {}
    for pod in pods:
        meeting = next((e for e in events(k, pod["metadata"]["name"]) if e["event"] == "rendezvous"), None)
        if meeting is None:
            return None
        met[int(pod["metadata"]["labels"][LABEL_RANK])] = (meeting, pod)
    return met


def assert_ranks_saw_their_gpus(met: dict[int, Any], placement: dict[str, Any], workers: int) -> None:
    """Every rank met the same world, and its container saw the GPUs that the job's status reports for it."""
    by_rank = {w["rank"]: w for w in placement["workers"]}
    assert sorted(met) == list(range(workers))
    for rank, (meeting, pod) in met.items():
        assert meeting["world"] == workers and meeting["rank"] == rank, meeting
        assert pod["spec"]["nodeName"] == by_rank[rank]["node"]
        assert meeting["gpus"] == sorted(by_rank[rank]["gpus"]), (rank, meeting, by_rank[rank])
        assert len(meeting["gpu_uuids"]) == len(meeting["gpus"])


def test_each_worker_runs_its_own_real_topology_and_advertises_its_gpus(installed: Kind) -> None:
    expected = {"dgx-a100": ("NVIDIA A100-SXM4-80GB", "nvswitch"), "hgx-a100": ("NVIDIA A100-SXM4-80GB", "nvswitch"),
                "dgx1-v100": ("Tesla V100-SXM2-32GB", "nvlink-mesh")}  # fmt: skip
    for node in installed.get("nodes", "-l", "nvidia.com/gpu.present=true")["items"]:
        labels = node["metadata"]["labels"]
        model, interconnect = expected[labels[TOPOLOGY_LABEL]]
        assert labels.get("gputopo.io/gpu.count") == "8", labels
        assert labels.get("gputopo.io/interconnect") == interconnect, labels
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"  # from the probe's device plugin
        gpus = installed.get("nodetopology", node["metadata"]["name"])["status"]["gpus"]
        assert {g["model"] for g in gpus} == {model}
    probes = installed.get("pods", "-n", NS, "-l", PROBE)["items"]
    assert len(probes) == 4 and all(p["status"]["phase"] == "Running" for p in probes)
    operators = installed.get("pods", "-n", NS, "-l", OPERATOR)["items"]
    assert len(operators) == 2 and all(p["status"]["phase"] == "Running" for p in operators)


def test_kubectl_gputopo_status_and_the_map_answer_against_kind(installed: Kind) -> None:
    topologies = {t["metadata"]["name"]: len(t["status"]["gpus"]) for t in installed.get("nodetopology")["items"]}
    status, drawn = status_and_map(installed.kubeconfig)
    assert status["totals"]["nodes"] == len(topologies) == 4 and status["totals"]["gpus"] == sum(topologies.values())
    assert sorted(n["name"] for n in drawn["nodes"]) == sorted(topologies)


def test_a_gang_rendezvous_across_nodes_and_succeeds(installed: Kind) -> None:
    job = "ring"
    t_apply = apply(installed, allreduce_job(job, workers=2, seconds=8))
    met = wait_for("both ranks to rendezvous", lambda: rendezvoused(installed, job, 2), timeout=300, every=EVERY)
    TIMINGS["kubectl apply -> every rank rendezvoused (2 nodes)"] = max(m["time"] for m, _ in met.values()) - t_apply
    status = wait_for(f"{job} to succeed", lambda: phase(installed, job, "Succeeded"), timeout=300, every=EVERY)
    placement = status["placement"]
    assert len({w["node"] for w in placement["workers"]}) == 2, "a multi-node gang"
    assert_ranks_saw_their_gpus(met, placement, 2)
    for _, pod in met.values():
        done = [e for e in events(installed, pod["metadata"]["name"]) if e["event"] in ("allreduce", "done")]
        assert [e["event"] for e in done] == ["allreduce", "done"] and done[0]["ok"], done
    assert status.get("restarts", 0) == 0


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def test_with_the_device_plugin_the_status_tells_the_gpus_the_kubelet_gave(installed: Kind) -> None:
    """gpuAllocation=devicePlugin plans the device plugin's own choice on the node's free GPUs; the real kubelet
    asks the (fake) plugin's GetPreferredAllocation and hands its choice to the container. Two gangs of 2-GPU
    ranks, one after the other: once the probes' PodResources reports are in, GpusAsPlanned says whether the
    kubelet gave the planned GPUs (True) or others (False, naming the device plugin), and the status names the
    GPUs each rank's container really saw."""
    for job in ("pair-a", "pair-b"):
        manifest = allreduce_job(job, workers=2, seconds=120)
        manifest["spec"]["gpusPerWorker"] = 2
        manifest["spec"]["topology"] = {"intraNode": "any"}
        apply(installed, manifest)
        met = wait_for(f"{job} to rendezvous", lambda j=job: rendezvoused(installed, j, 2), timeout=300, every=EVERY)
        wait_for(f"{job} to run", lambda j=job: phase(installed, j, "Running"), timeout=120, every=EVERY)

        def reported(j: str = job) -> dict[str, Any] | None:
            now = status_of(installed, j)
            assert now.get("phase") == "Running", f"{j} stopped before its GPUs were reported: {now}"
            found = condition(now, "GpusAsPlanned")
            return now if found and found["status"] != "Unknown" else None

        status = wait_for(f"{job}'s GpusAsPlanned", reported, timeout=100, every=EVERY)
        verdict = condition(status, "GpusAsPlanned")
        assert verdict is not None
        assert (verdict["status"], verdict["reason"]) in {("True", "Reported"), ("False", "DevicePluginChoseOtherGpus")}
        assert_ranks_saw_their_gpus(met, status["placement"], 2)
        print(f"{job}: GpusAsPlanned {verdict['status']} ({verdict['reason']}): {verdict['message']}")
    for job in ("pair-a", "pair-b"):
        installed.kubectl("delete", "trainingjob", job, "-n", JOBS_NS, "--wait=false")
    # The garbage collector deletes their pods with the pods' own grace (the template's default, 30 s; the
    # all-reduce, PID 1 of its container, does not end on SIGTERM), and until they are gone their GPUs are held:
    # the next test's gang must not wait for them, nor its timings count them.
    pairs = ("pair-a", "pair-b")
    wait_for("the deleted pairs' pods to go", lambda: not any(pods_of(installed, j) for j in pairs), 120, EVERY)


@contextlib.contextmanager
def link_down_under_rank0(k: Kind, placement: dict[str, Any]) -> Iterator[tuple[str, int, int, float]]:
    """Take down the NVLink between two of rank 0's GPUs (the fake NVML of its node's probe) until the block ends;
    yields the node, the two GPUs and the wall-clock time of the fault."""
    rank0 = next(w for w in placement["workers"] if w["rank"] == 0)
    node, (a, b) = rank0["node"], sorted(rank0["gpus"])[:2]
    probe = k.kubectl(
        "get", "pods", "-n", NS, "-l", PROBE, "--field-selector", f"spec.nodeName={node}",
        "-o", "jsonpath={.items[0].metadata.name}",
    )  # fmt: skip
    faults = f"from gputopo_probe.fake.faults import FaultStore; FaultStore({FAULT_DIR!r})"
    t_fault = time.time()
    k.kubectl("exec", "-n", NS, probe, "--", "python", "-c", f"{faults}.link({node!r}, {a}, {b}, 'down')")
    try:
        yield node, a, b, t_fault
    finally:
        k.kubectl("exec", "-n", NS, probe, "--", "python", "-c", f"{faults}.clear({node!r})")


def test_a_link_fault_moves_the_gang_which_rendezvous_again_and_succeeds(installed: Kind) -> None:
    job = "ring-fault"
    apply(installed, allreduce_job(job, workers=2, seconds=30))
    first = wait_for("both ranks to rendezvous", lambda: rendezvoused(installed, job, 2), timeout=300, every=EVERY)
    status = wait_for(f"{job} to run", lambda: phase(installed, job, "Running"), timeout=120, every=EVERY)
    before = status["placement"]
    assert_ranks_saw_their_gpus(first, before, 2)
    with link_down_under_rank0(installed, before) as (node, a, b, t_fault):
        old = frozenset(m[1]["metadata"]["uid"] for m in first.values())
        again = wait_for(
            "the re-placed gang to rendezvous",
            lambda: rendezvoused(installed, job, 2, not_uids=old),
            timeout=300,
            every=EVERY,
        )
        TIMINGS["link fault -> re-placed gang rendezvoused"] = max(m["time"] for m, _ in again.values()) - t_fault
        status = wait_for(f"{job} to succeed", lambda: phase(installed, job, "Succeeded"), timeout=300, every=EVERY)
        after = status["placement"]
        assert after["generation"] > before["generation"] and status["restarts"] >= 1
        for worker in after["workers"]:
            assert not (worker["node"] == node and {a, b} <= set(worker["gpus"])), "still on the failed link"
        assert_ranks_saw_their_gpus(again, after, 2)


# A gang gputopo does not own: an Indexed Job whose PodGroup the Job controller makes (spec.scheduling), written
# as a user writes one for torchrun, with nothing of gputopo's but an annotation that asks for NVSwitch nodes.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
GATE = "gputopo.io/placement"


def gang_job(name: str, seconds: int) -> list[dict[str, Any]]:
    """A headless Service and an Indexed Job of two 8-GPU ranks that rendezvous at rank 0 through it."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {"clusterIP": "None", "selector": {JOB_NAME: name}, "ports": [{"name": "master", "port": 29500}]},
    }
    env = [
        {"name": "PET_NODE_RANK",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
        {"name": "PET_NNODES", "value": "2"},
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}"},  # the pod's hostname under the Service
        {"name": "MASTER_PORT", "value": "29500"},
    ]  # fmt: skip
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            # An elastic trainer's ranks are evicted off a fault and made again: an eviction (the pod's condition
            # DisruptionTarget) is no failure of the job, so it counts against no backoff. Any real failure does,
            # and fails the job at once.
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            # All or nothing: the ranks start together, and a fault under one rank evicts them all, since a
            # rank without its peers can only fail.
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}},
            "template": {
                "metadata": {"annotations": {"gputopo.io/intra-node": "nvswitch"}},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "terminationGracePeriodSeconds": 1,  # the all-reduce, PID 1, does not end on SIGTERM
                    "containers": [{
                        "name": "trainer",
                        "image": f"gputopo-allreduce:{TAG}",
                        "imagePullPolicy": "Never",
                        "args": ["--seconds", str(seconds)],
                        "env": env,
                        "ports": [{"name": "master", "containerPort": 29500}],
                        "resources": {"limits": {"nvidia.com/gpu": 8}},
                    }],
                },
            },
        },
    }  # fmt: skip
    return [service, job]


def job_rendezvoused(k: Kind, job: str, not_uids: frozenset[str] = frozenset()) -> dict[int, Any] | None:
    """Rank -> (its rendezvous event, its pod) once both ranks of the Job's pods not in ``not_uids`` have met."""
    pods = [
        p
        for p in k.get("pods", "-n", JOBS_NS, "-l", f"{JOB_NAME}={job}")["items"]
        if p["metadata"]["uid"] not in not_uids and not p["metadata"].get("deletionTimestamp")
    ]
    if len(pods) != 2:
        return None
    met = {}
    for pod in pods:
        meeting = next((e for e in events(k, pod["metadata"]["name"]) if e["event"] == "rendezvous"), None)
        if meeting is None:
            return None
        met[int(pod["metadata"]["labels"][COMPLETION_INDEX])] = (meeting, pod)
    return met


def gang_record(k: Kind, job: str) -> dict[str, Any] | None:
    """The GangPlacement of the Job's PodGroup, checked to be of that PodGroup; None while there is none."""
    groups = [
        g
        for g in k.get("podgroups.scheduling.k8s.io", "-n", JOBS_NS)["items"]
        if any(o.get("controller") and o["name"] == job for o in g["metadata"].get("ownerReferences", []))
    ]
    if not groups:
        return None
    (group,) = groups
    records = [
        r for r in k.get("gangplacements", "-n", JOBS_NS)["items"] if r["spec"].get("owner", {}).get("name") == job
    ]
    if not records:
        return None
    (record,) = records
    assert (record["spec"]["source"], record["spec"]["gang"]) == ("podgroup", group["metadata"]["name"]), record
    return record


def record_phase(k: Kind, job: str, wanted: str, restarts: int = 0) -> dict[str, Any] | None:
    record = gang_record(k, job)
    status = (record or {}).get("status") or {}
    if status.get("phase") in ("Refused", "Unplaceable"):
        raise AssertionError(f"{job}'s gang: {json.dumps(status)[:2000]}")
    return status if status.get("phase") == wanted and status.get("restarts", 0) == restarts else None


def job_done(k: Kind, job: str) -> dict[str, Any] | None:
    conditions = (k.get("job", job, "-n", JOBS_NS).get("status") or {}).get("conditions", [])
    done = {c["type"] for c in conditions if c["status"] == "True"}
    if "Failed" in done:
        raise AssertionError(f"job {job} failed: {json.dumps(conditions)[:2000]}")
    return {"conditions": conditions} if "Complete" in done else None


def job_events(k: Kind, job: str) -> list[str]:
    """The reasons of the Events about the Job (the operator's gang Events are about the gang's owner)."""
    found = k.get("events", "-n", JOBS_NS, "--field-selector", f"involvedObject.kind=Job,involvedObject.name={job}")
    return [e["reason"] for e in found["items"]]


def assert_pinned_to_the_plan(k: Kind, job: str, met: dict[int, Any], plan: dict[str, Any]) -> None:
    """Each rank's pod was let through gputopo's gate pinned to its rank's plan (node affinity and annotations),
    runs there, and its container got the planned GPUs (the device plugin's GPUTOPO_VISIBLE_GPUS)."""
    by_rank = {r["rank"]: r for r in plan["ranks"]}
    assert sorted(met) == sorted(by_rank) == [0, 1], (sorted(met), plan)
    assert len({r["node"] for r in plan["ranks"]}) == 2, "a multi-node gang"
    for rank, (meeting, pod) in met.items():
        planned = by_rank[rank]
        assert len(planned["gpus"]) == 8 and planned["pod"] == pod["metadata"]["name"], planned
        assert meeting["world"] == 2 and meeting["rank"] == rank, meeting
        assert pod["spec"]["nodeName"] == planned["node"]
        assert GATE not in json.dumps(pod["spec"].get("schedulingGates", []))
        annotations = pod["metadata"]["annotations"]
        assert annotations["gputopo.io/gpus"] == ",".join(map(str, planned["gpus"])), annotations
        assert annotations[ANNOTATION_PLACEMENT_GENERATION] == str(plan["generation"]), annotations
        assert annotations["gputopo.io/gang-id"] == f"podgroup/{pod['spec']['schedulingGroup']['podGroupName']}"
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        pin = {"key": "metadata.name", "operator": "In", "values": [planned["node"]]}
        assert all(pin in term.get("matchFields", []) for term in terms["nodeSelectorTerms"]), terms
        assert meeting["gpus"] == sorted(planned["gpus"]), (rank, meeting, planned)
        assert len(meeting["gpu_uuids"]) == 8


def assert_the_policy_gates(k: Kind, job: str, group: str) -> None:
    """The chart's admission policy, as installed, gates a pod of this Job's shape in this namespace: a
    server-side dry run of such a pod comes back with gputopo's scheduling gate."""
    template = k.get("job", job, "-n", JOBS_NS)["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job}-dry-run", "namespace": JOBS_NS,
                     "labels": {**template["metadata"].get("labels", {}), COMPLETION_INDEX: "0"}},
        "spec": {**template["spec"], "schedulingGroup": {"podGroupName": group}},
    }  # fmt: skip
    out = k.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    gates = [g["name"] for g in json.loads(out)["spec"].get("schedulingGates", [])]
    assert gates == [GATE], gates


def test_an_indexed_job_gang_is_gated_placed_whole_and_succeeds(installed: Kind) -> None:
    policies = installed.get("mutatingadmissionpolicies")["items"]
    assert any(GATE in json.dumps(p["spec"]) for p in policies), "the chart installed no gang gate"
    job = "gang"
    t_apply = time.time()
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(gang_job(job, seconds=8)))
    met = wait_for("both ranks to rendezvous", lambda: job_rendezvoused(installed, job), timeout=300, every=EVERY)
    TIMINGS["kubectl apply of an Indexed Job -> every rank rendezvoused"] = (
        max(m["time"] for m, _ in met.values()) - t_apply
    )
    record = gang_record(installed, job)
    assert record is not None
    plan = record["status"]
    assert plan["generation"] == 1 and plan.get("restarts", 0) == 0, plan
    assert_pinned_to_the_plan(installed, job, met, plan)
    assert_the_policy_gates(installed, job, record["spec"]["gang"])
    wait_for(f"job {job} to complete", lambda: job_done(installed, job), timeout=300, every=EVERY)
    for _, pod in met.values():
        done = [e for e in events(installed, pod["metadata"]["name"]) if e["event"] in ("allreduce", "done")]
        assert [e["event"] for e in done] == ["allreduce", "done"] and done[0]["ok"], done
    ended = wait_for("the gang's plan released", lambda: record_phase(installed, job, "Released"), 60, EVERY)
    assert {(r["rank"], r["node"]) for r in ended["ranks"]} == {(r["rank"], r["node"]) for r in plan["ranks"]}
    reasons = job_events(installed, job)
    assert "GangPlaced" in reasons and "GangIncomplete" not in reasons, reasons  # done, not incomplete


def test_a_link_fault_moves_an_indexed_job_gang_which_rendezvous_again_and_succeeds(installed: Kind) -> None:
    job = "gang-fault"
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(gang_job(job, seconds=30)))
    first = wait_for("both ranks to rendezvous", lambda: job_rendezvoused(installed, job), timeout=300, every=EVERY)
    before = wait_for("the gang to run", lambda: record_phase(installed, job, "Running"), timeout=60, every=EVERY)
    assert_pinned_to_the_plan(installed, job, first, before)
    with link_down_under_rank0(installed, {"workers": before["ranks"]}) as (node, a, b, t_fault):
        old = frozenset(m[1]["metadata"]["uid"] for m in first.values())
        again = wait_for(
            "the re-placed gang to rendezvous", lambda: job_rendezvoused(installed, job, not_uids=old), timeout=300,
            every=EVERY,
        )  # fmt: skip
        TIMINGS["link fault -> re-placed Indexed Job gang rendezvoused"] = (
            max(m["time"] for m, _ in again.values()) - t_fault
        )
        after = wait_for("the gang to run again", lambda: record_phase(installed, job, "Running", 1), 60, EVERY)
        assert after["generation"] > before["generation"], (before, after)
        assert after["lastRestartReason"], after
        for rank in after["ranks"]:
            assert not (rank["node"] == node and {a, b} <= set(rank["gpus"])), "still on the failed link"
        assert_pinned_to_the_plan(installed, job, again, after)
        wait_for(f"job {job} to complete", lambda: job_done(installed, job), timeout=300, every=EVERY)
    reasons = job_events(installed, job)
    assert "GangPlaced" in reasons and "GangRestarting" in reasons, reasons
    assert "GangIncomplete" not in reasons, reasons  # a restart and a finished job are no incomplete gang
    for _, pod in again.values():
        done = [e for e in events(installed, pod["metadata"]["name"]) if e["event"] in ("allreduce", "done")]
        assert [e["event"] for e in done] == ["allreduce", "done"] and done[0]["ok"], done


def operator_pods(k: Kind) -> set[str]:
    return {p["metadata"]["name"] for p in k.get("pods", "-n", NS, "-l", OPERATOR)["items"]}


def leader(k: Kind) -> str:
    """The operator pod that leads: the live peer of the highest priority in the kopf peering."""
    pods = operator_pods(k)
    peers = k.get("clusterkopfpeering", RELEASE).get("status") or {}
    live = {name: peer["priority"] for name, peer in peers.items() if name in pods}
    assert live, f"no operator pod in the peering {sorted(peers)}"
    return max(live, key=lambda name: live[name])


def test_the_standby_takes_over_when_the_leader_is_deleted_mid_placement(installed: Kind) -> None:
    job = "ring-failover"
    old_leader = leader(installed)
    apply(installed, allreduce_job(job, workers=2, seconds=3))
    installed.kubectl("delete", "pod", "-n", NS, old_leader, "--wait=false")
    uids: dict[int, set[str]] = {}

    def succeeded() -> dict[str, Any] | None:
        for pod in pods_of(installed, job):
            uids.setdefault(int(pod["metadata"]["labels"][LABEL_RANK]), set()).add(pod["metadata"]["uid"])
        return phase(installed, job, "Succeeded")

    status = wait_for(f"{job} to succeed under the standby", succeeded, timeout=300, every=0.5)
    assert status.get("restarts", 0) == 0
    assert {rank: len(seen) for rank, seen in uids.items()} == {0: 1, 1: 1}, f"duplicate pods: {uids}"
    # The deleted leader may still be terminating when the job is done (its grace period): it must go, not be back.
    wait_for(f"the old leader {old_leader} gone", lambda: old_leader not in operator_pods(installed), 120, EVERY)
    wait_for("a new leader", lambda: leader(installed) != old_leader, timeout=120, every=EVERY)


def test_helm_upgrade_with_a_changed_value_rolls_the_operator(installed: Kind) -> None:
    def template_checksum() -> str:
        deployment = installed.get("deployment", "-n", NS, "-l", OPERATOR)["items"][0]
        return str(deployment["spec"]["template"]["metadata"].get("annotations", {}))

    before = template_checksum()
    old_pods = {p["metadata"]["name"] for p in installed.get("pods", "-n", NS, "-l", OPERATOR)["items"]}
    installed.helm(
        "upgrade", RELEASE, str(ROOT / "charts" / "gputopo"), "-n", NS, "--reuse-values", "--wait", "--timeout", "5m",
        "--set", "operator.config.unschedulableTimeoutSeconds=90",
    )  # fmt: skip
    assert template_checksum() != before, "the config checksum in the pod template did not change"

    def rolled() -> bool:
        pods = installed.get("pods", "-n", NS, "-l", OPERATOR)["items"]
        names = {p["metadata"]["name"] for p in pods}
        ready = [
            p
            for p in pods
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
        return not names & old_pods and len(ready) == 2

    wait_for("two new, ready operator pods", rolled, timeout=300, every=EVERY)
    config = installed.get("configmap", "-n", NS, "-l", OPERATOR)["items"][0]["data"]
    assert "90" in json.dumps(config)


def claims_of(k: Kind, job: str) -> list[dict[str, Any]]:
    return list(k.get("resourceclaims", "-n", JOBS_NS, "-l", f"{LABEL_JOB}={job}")["items"])


def assert_claims_hold_the_plan(k: Kind, job: str, placement: dict[str, Any], met: dict[int, Any]) -> None:
    """Each rank's pod uses its own claim of this placement, and kube-scheduler allocated it the planned GPUs
    of the planned node (the fake driver names a GPU ``gpu-<index>``), for that pod alone."""
    by_name = {c["metadata"]["name"]: c for c in claims_of(k, job)}
    for worker in placement["workers"]:
        rank = worker["rank"]
        pod = met[rank][1]
        assert "nvidia.com/gpu" not in json.dumps(pod["spec"]["containers"][0].get("resources", {}))
        (ref,) = pod["spec"]["resourceClaims"]
        claim = by_name[ref["resourceClaimName"]]
        assert claim["metadata"]["annotations"][ANNOTATION_PLACEMENT_GENERATION] == str(placement["generation"])
        results = claim["status"]["allocation"]["devices"]["results"]
        assert {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", worker["node"])}
        assert sorted(int(r["device"].removeprefix("gpu-")) for r in results) == sorted(worker["gpus"])
        assert [c["uid"] for c in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]


def probes_report_the_plan(k: Kind, placement: dict[str, Any], met: dict[int, Any]) -> bool:
    """Each rank's node's probe reports the rank's pod holding its planned GPUs (from the kubelet's PodResources)."""
    for worker in placement["workers"]:
        name = met[worker["rank"]][1]["metadata"]["name"]
        pods = k.get("nodepodgpus", worker["node"]).get("status", {}).get("pods", [])
        if {"namespace": JOBS_NS, "name": name, "gpus": sorted(worker["gpus"])} not in pods:
            return False
    return True


def test_with_dra_each_rank_gets_exactly_its_planned_gpus_before_and_after_a_move(installed: Kind) -> None:
    """gpuAllocation=dra with the probe as NVIDIA's DRA driver: kube-scheduler allocates each rank's claim, the
    kubelet has the probe's DRA plugin prepare it, and containerd hands the container its GPUs through CDI."""
    installed.helm(
        "upgrade", RELEASE, str(ROOT / "charts" / "gputopo"), "-n", NS, "--reuse-values", "--wait", "--timeout", "5m",
        "--set", "operator.config.gpuAllocation=dra", "--set", "probe.fakeAllocation=dra",
    )  # fmt: skip
    gpu_nodes = {n["metadata"]["name"] for n in installed.get("nodes", "-l", "nvidia.com/gpu.present=true")["items"]}

    def published() -> bool:
        slices = installed.get("resourceslices")["items"]
        full = {s["spec"]["nodeName"] for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"
                and len(s["spec"]["devices"]) == 8}  # fmt: skip
        return full == gpu_nodes

    wait_for("every GPU node's ResourceSlice", published, timeout=180, every=EVERY)
    job = "ring-dra"
    t_apply = apply(installed, allreduce_job(job, workers=2, seconds=30))
    first = wait_for("both ranks to rendezvous", lambda: rendezvoused(installed, job, 2), timeout=300, every=EVERY)
    TIMINGS["kubectl apply -> every rank rendezvoused (2 nodes, DRA)"] = (
        max(m["time"] for m, _ in first.values()) - t_apply
    )
    before = wait_for(f"{job} to run", lambda: phase(installed, job, "Running"), timeout=120, every=EVERY)["placement"]
    assert_ranks_saw_their_gpus(first, before, 2)
    assert_claims_hold_the_plan(installed, job, before, first)
    wait_for("the probes to report the planned GPUs", lambda: probes_report_the_plan(installed, before, first), 30)

    with link_down_under_rank0(installed, before) as (node, a, b, t_fault):
        old = frozenset(m[1]["metadata"]["uid"] for m in first.values())
        again = wait_for(
            "the re-placed gang to rendezvous", lambda: rendezvoused(installed, job, 2, not_uids=old), timeout=300,
            every=EVERY,
        )  # fmt: skip
        TIMINGS["link fault -> re-placed gang rendezvoused (DRA)"] = max(m["time"] for m, _ in again.values()) - t_fault

        def moved() -> dict[str, Any] | None:
            status = phase(installed, job, "Running")
            return status if status and status["placement"]["generation"] > before["generation"] else None

        placement = wait_for(f"{job} to run again", moved, timeout=120, every=EVERY)["placement"]
        for worker in placement["workers"]:
            assert not (worker["node"] == node and {a, b} <= set(worker["gpus"])), "still on the failed link"
        assert_ranks_saw_their_gpus(again, placement, 2)
        assert_claims_hold_the_plan(installed, job, placement, again)
        wait_for("the probes to report them", lambda: probes_report_the_plan(installed, placement, again), 30)
        generation = str(placement["generation"])
        stale = [
            c["metadata"]["name"]
            for c in claims_of(installed, job)
            if c["metadata"]["annotations"][ANNOTATION_PLACEMENT_GENERATION] != generation
        ]
        assert not stale, f"claims of an earlier placement left behind: {stale}"
        wait_for(f"{job} to succeed", lambda: phase(installed, job, "Succeeded"), timeout=300, every=EVERY)
        wait_for("the finished job's claims released", lambda: not claims_of(installed, job), timeout=60, every=EVERY)


def test_helm_uninstall_leaves_no_gputopo_pods_and_keeps_the_crds_and_jobs(installed: Kind) -> None:
    # A pod still held by gputopo's gate (beside a gate of someone else's) when the release goes: a rank of a
    # gang of 64 eight-GPU ranks, which the operator cannot place here and so leaves gated.
    held = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "held-at-uninstall", "namespace": JOBS_NS,
                     "labels": {"gputopo.io/gang": "held-at-uninstall", "gputopo.io/gang-size": "64"}},
        "spec": {
            "schedulingGates": [{"name": "gputopo.io/placement"}, {"name": "example.com/hold"}],
            "containers": [{"name": "main", "image": "gputopo-allreduce:" + TAG,
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }  # fmt: skip
    installed.kubectl("apply", "-f", "-", input=json.dumps(held))
    installed.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m")
    wait_for("no pods left in the release namespace", lambda: not installed.get("pods", "-n", NS)["items"], timeout=180)
    # The post-delete hook lifted gputopo's gate, and only it.
    gates = installed.get("pod", "held-at-uninstall", "-n", JOBS_NS)["spec"].get("schedulingGates")
    installed.kubectl("delete", "pod", "held-at-uninstall", "-n", JOBS_NS, "--wait=false")
    assert gates == [{"name": "example.com/hold"}]
    # docs/install.md and the README: crds.keep (the default) keeps the CRDs, and with them the jobs.
    crds = {c["metadata"]["name"] for c in installed.get("crds")["items"]}
    assert {"trainingjobs.gputopo.io", "nodetopologies.gputopo.io", "nodepodgpus.gputopo.io"} <= crds
    jobs = {j["metadata"]["name"] for j in installed.get("trainingjobs", "-n", JOBS_NS)["items"]}
    assert {"ring", "ring-fault", "ring-failover"} <= jobs
