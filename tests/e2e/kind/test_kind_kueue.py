"""Under Kueue on kind: Kueue's real manager admits by quota, gputopo places, real kubelets run the ranks.

Kueue is installed as its release manifests install it (``gputopo.sandbox.kueue_release``: the module's own
``config/default``, with the manager's image ``gputopo/kueue:<version>`` built here and loaded into kind), before
the chart, as on a cluster that already runs Kueue. Then, as docs/install.md's "Under Kueue: Kueue-managed jobs"
says, a ResourceFlavor without a topology for the GPU nodes, a ClusterQueue of their GPUs and a LocalQueue.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kind_cluster import CLUSTER, EVERY, ROOT, TAG, TIMINGS, Kind, run, tool
from test_kind import GATE, JOBS_NS, events, gang_job, job_done, job_rendezvoused

from gputopo.sandbox.kueue_harness import KueueJobs
from gputopo.sandbox.kueue_install import KUEUE_NAMESPACE, WEBHOOK_SECRET, WEBHOOK_SERVICE, find_kueue
from gputopo.sandbox.kueue_queues import GPU_NODE_LABELS, GPUTOPO_QUEUE, QUEUE_LABEL, capacity_quota, resource_flavor
from gputopo.sandbox.kueue_release import kueue_image, render_release
from gputopo.sandbox.testing import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

MANAGER = "app.kubernetes.io/name=kueue,control-plane=controller-manager"


@pytest.fixture(scope="module")
def kueue(cluster: Kind) -> Kind:
    """Kueue's release on the cluster, its manager ready (its webhooks serve with the certificates it made)."""
    install = find_kueue()
    image = kueue_image(install)
    if run("docker", "image", "ls", "-q", image).strip() == "":
        run("bash", str(ROOT / "hack" / "build-images.sh"), TAG, timeout=1800)
    t0 = time.monotonic()
    run(str(tool("kind")), "load", "docker-image", image, "--name", CLUSTER)
    docs = render_release(install, cluster.kubectl_bin, image)
    # As Kueue's installation says: server-side, since its CRDs are too large for the last-applied annotation.
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                          "items": docs}))  # fmt: skip
    # Kueue's manager makes its CA and serving certificate into its Secret at once, then waits for the files in its
    # Secret volume. The kubelet refreshes that volume at its periodic pod sync (about a minute), and Kueue's
    # cert-controller (open-policy-agent/cert-controller v0.16.0, ensureCertsMounted) looks for them with a backoff
    # that doubles from 1 s with as much jitter, so a first pod that mounted the Secret empty is ready after 30 s
    # to 3.5 minutes here (more under load). A pod made once the Secret is filled mounts the certificates and is
    # ready in seconds.
    wait_for("Kueue's certificates in its Secret", lambda: certificates_made(cluster), timeout=120, every=EVERY)
    first = {p["metadata"]["name"] for p in cluster.get("pods", "-n", KUEUE_NAMESPACE, "-l", MANAGER)["items"]}
    cluster.kubectl("delete", "pod", "-n", KUEUE_NAMESPACE, "--wait=true", "--timeout=120s", *first, timeout=150)
    wait_for("Kueue's manager ready behind its webhook Service", lambda: serving(cluster), timeout=180, every=EVERY)
    TIMINGS["kind load of Kueue's image and its release until the manager is ready"] = time.monotonic() - t0
    return cluster


def certificates_made(k: Kind) -> bool:
    data = k.get("secret", WEBHOOK_SECRET, "-n", KUEUE_NAMESPACE).get("data") or {}
    return all(data.get(name) for name in ("ca.crt", "tls.crt", "tls.key"))


def serving(k: Kind) -> bool:
    """The manager's one pod is Ready and is the ready endpoint of Kueue's webhook Service."""
    pods = k.get("pods", "-n", KUEUE_NAMESPACE, "-l", MANAGER)["items"]
    if len(pods) != 1 or not any(
        c["type"] == "Ready" and c["status"] == "True" for c in pods[0]["status"].get("conditions", [])
    ):
        return False
    slices = k.get("endpointslices", "-n", KUEUE_NAMESPACE, "-l", f"kubernetes.io/service-name={WEBHOOK_SERVICE}")
    ready = {a for s in slices["items"] for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")
             for a in e["addresses"]}  # fmt: skip
    return ready == {pods[0]["status"].get("podIP")}


@pytest.fixture(scope="module")
def queued(kueue: Kind, installed: Kind) -> Kind:
    """The gputopo flavor, its ClusterQueue of every GPU node's allocatable GPUs, CPU and memory, and the LocalQueue
    in the jobs' namespace (the chart is installed after Kueue: ``installed`` comes second)."""
    nodes = installed.get("nodes", "-l", ",".join(f"{k}={v}" for k, v in GPU_NODE_LABELS.items()))["items"]
    installed.kubectl("apply", "-f", "-", input=json.dumps(resource_flavor(GPUTOPO_QUEUE, GPU_NODE_LABELS)))
    KueueJobs(installed.kubectl, JOBS_NS).create_queue(GPUTOPO_QUEUE, capacity_quota(nodes), timeout=60)
    return installed


def test_kueues_manager_runs_in_kind_from_the_image_built_here(kueue: Kind) -> None:
    (pod,) = kueue.get("pods", "-n", KUEUE_NAMESPACE, "-l", MANAGER)["items"]
    assert pod["status"]["phase"] == "Running"
    assert [c["image"] for c in pod["spec"]["containers"]] == [kueue_image(find_kueue())]
    for kind in ("mutating", "validating"):
        webhooks = kueue.get(f"{kind}webhookconfiguration", f"kueue-{kind}-webhook-configuration")["webhooks"]
        assert all(w["clientConfig"].get("caBundle") for w in webhooks), f"{kind} webhooks: no CA injected"
    # The release's visibility server too: the API server reaches the manager's aggregated API over the pod network.
    for version in ("v1beta1", "v1beta2"):
        apiservice = f"{version}.visibility.kueue.x-k8s.io"
        wait_for(f"APIService {apiservice} available", lambda a=apiservice: available(kueue, a), timeout=60)


def available(k: Kind, apiservice: str) -> bool:
    conditions = (k.get("apiservice", apiservice).get("status") or {}).get("conditions", [])
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def kueue_job(name: str, seconds: int) -> list[dict[str, Any]]:
    """test_kind's Indexed Job of two 8-GPU allreduce ranks and its headless Service, for the LocalQueue
    ``gputopo``: a plain Indexed Job (no ``spec.scheduling``), so its gang is the Job, as docs/install.md's
    worked example writes it."""
    service, job = gang_job(name, seconds)
    del job["spec"]["scheduling"]
    job["metadata"]["labels"] = {QUEUE_LABEL: GPUTOPO_QUEUE}
    return [service, job]


def test_a_kueue_job_is_suspended_admitted_placed_by_gputopo_and_succeeds(queued: Kind) -> None:
    kind, jobs, name = queued, KueueJobs(queued.kubectl, JOBS_NS), "kueue-ring"
    service, manifest = kueue_job(name, seconds=8)
    kind.kubectl("apply", "-f", "-", input=json.dumps(service))
    t_create = time.time()
    created = jobs.create(manifest)
    assert created["spec"]["suspend"] is True, "Kueue's webhook did not suspend the Job"
    workload = jobs.wait_admitted(name, timeout=120)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert workload["status"]["admission"]["clusterQueue"] == GPUTOPO_QUEUE
    assert assignment["flavors"]["nvidia.com/gpu"] == GPUTOPO_QUEUE and assignment["count"] == 2, assignment

    met = wait_for("both ranks to rendezvous", lambda: job_rendezvoused(kind, name), timeout=300, every=EVERY)
    TIMINGS["kubectl create of a Kueue Job -> admitted, placed, every rank rendezvoused"] = (
        max(m["time"] for m, _ in met.values()) - t_create
    )
    record = kind.get("gangplacement", f"job-{name}", "-n", JOBS_NS)
    plan = record["status"]
    assert record["spec"]["source"] == "job" and plan["generation"] == 1, record
    by_rank = {r["rank"]: r for r in plan["ranks"]}
    assert sorted(by_rank) == sorted(met) == [0, 1] and len({r["node"] for r in plan["ranks"]}) == 2, plan
    for rank, (meeting, pod) in met.items():
        planned = by_rank[rank]
        assert pod["spec"]["nodeName"] == planned["node"] and planned["pod"] == pod["metadata"]["name"]
        assert GATE not in json.dumps(pod["spec"].get("schedulingGates", []))
        assert pod["metadata"]["annotations"]["gputopo.io/gpus"] == ",".join(map(str, planned["gpus"]))
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        pin = {"key": "metadata.name", "operator": "In", "values": [planned["node"]]}
        assert all(pin in term.get("matchFields", []) for term in terms["nodeSelectorTerms"]), terms
        assert pod["spec"]["nodeSelector"] == GPU_NODE_LABELS  # Kueue's flavor, kept
        assert meeting["world"] == 2 and meeting["rank"] == rank and meeting["gpus"] == sorted(planned["gpus"])

    wait_for(f"job {name} to complete", lambda: job_done(kind, name), timeout=300, every=EVERY)
    for _, pod in met.values():
        done = [e for e in events(kind, pod["metadata"]["name"]) if e["event"] in ("allreduce", "done")]
        assert [e["event"] for e in done] == ["allreduce", "done"] and done[0]["ok"], done
    finished = jobs.wait_finished(name, timeout=120)
    assert finished["metadata"]["name"] == workload["metadata"]["name"]
