"""What one write costs the API server, by what is written: the writes of a burst of training jobs.

On a sandbox of its own (no probes, no operator: nothing else writes), each kind of write is made ``--writes``
times in a row from this process, and the API server's CPU seconds (``/proc/<pid>/stat``) and the wall time
are divided by that count:

* a NodeTopology status as a probe publishes it (the full status of an 8-GPU ``hgx-h100``, about 8 kB), by
  server-side apply (the probe's way) and by JSON merge patch; and one that changes only ``observedAt``;
* a NodePodGpus status as a probe publishes it (four pods), by server-side apply;
* a TrainingJob status (a phase and a message), and a TrainingJob created;
* a GangPlacement created (the record of a gang gputopo does not own), and its status with a two-rank plan (the
  operator's whole status, as it writes it for a 2x8 gang);
* a pod created, a pod's labels patched, and a gated pod steered (the operator's JSON patch: its node in a
  required affinity, its GPUs in annotations, gputopo's gate lifted).

The figures say which writes of a burst weigh: the probes' NodeTopology writes cost several times a pod's,
which is why the pods on a node's GPUs are a small NodePodGpus of their own, written once per new pod, a second
after the probe sees it.

Writes bench/reports/api_writes.{json,md}.
Run: python bench/bench_api_writes.py [--writes 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gputopo.api.group import GROUP, VERSION
from gputopo.gangs.model import GATE, GangId
from gputopo.gangs.steer import steer_patch
from gputopo.sandbox import Sandbox
from gputopo.topology.catalog import load_node_type
from gputopo.topology.convert import to_status
from reporting import report_head, write_report

_TICKS = os.sysconf("SC_CLK_TCK")
NS = "bench-writes"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def stamp(i: int) -> str:
    return f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"


def measure(apiserver: int, writes: int, write: Callable[[int], Any]) -> dict[str, float]:
    write(0)  # the first of a kind warms what the API server builds once (a CRD's handler, say)
    cpu0, wall0 = cpu_seconds(apiserver), time.monotonic()
    for i in range(1, writes + 1):
        write(i)
    return {
        "apiserver_ms": 1000 * (cpu_seconds(apiserver) - cpu0) / writes,
        "wall_ms": 1000 * (time.monotonic() - wall0) / writes,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    box = Sandbox(args.sandbox)
    box.up(nodes=2, profile="mixed", probes=False, wait=120)
    try:
        cfg = client.Configuration()
        config.load_kube_config(str(box.kubeconfig), client_configuration=cfg)
        api = client.ApiClient(cfg)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        apiserver = int((box.cluster_dir / "pids" / "kube-apiserver.pid").read_text())
        core.create_namespace({"metadata": {"name": NS}})
        status = to_status(load_node_type("hgx-h100")).model_dump(mode="json", by_alias=True, exclude_none=True)
        pods = [{"namespace": "ml", "name": f"job-{i}-0", "gpus": [i]} for i in range(4)]
        head = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeTopology"}
        pods_head = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePodGpus"}

        def topology(name: str) -> str:
            custom.create_cluster_custom_object(GROUP, VERSION, "nodetopologies", {**head, "metadata": {"name": name}})
            return name

        applied, merged, stamped = topology("applied"), topology("merged"), topology("stamped")
        custom.create_cluster_custom_object(GROUP, VERSION, "nodepodgpus", {**pods_head, "metadata": {"name": "pods"}})
        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainingJob",
            "metadata": {"name": "job", "namespace": NS},
            "spec": {
                "workers": 1,
                "gpusPerWorker": 1,
                "template": {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}},
            },
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", job)

        def pod(i: int) -> dict[str, Any]:
            limits = {"nvidia.com/gpu": "1"}
            container = {"name": "trainer", "image": "pytorch", "resources": {"limits": limits}}
            return {"metadata": {"name": f"p{i}"}, "spec": {"containers": [container], "nodeName": "nowhere"}}

        gated = []
        for i in range(args.writes + 1):  # made before the steering is measured
            body = pod(i)
            body["metadata"]["name"] = f"g{i}"
            del body["spec"]["nodeName"]
            body["spec"]["schedulingGates"] = [{"name": GATE}]
            gated.append(core.api_client.sanitize_for_serialization(core.create_namespaced_pod(NS, body)))
        gang = GangId(NS, "podgroup", "gang")

        def record(i: int) -> dict[str, Any]:
            meta = {"name": f"podgroup-gang-{i}", "namespace": NS}
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GangPlacement", "metadata": meta,
                    "spec": {"source": "podgroup", "gang": f"gang-{i}", "size": 2}}  # fmt: skip

        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "gangplacements", record(-1))
        ranks = [{"rank": r, "node": f"hgx-h100-{r}", "gpus": list(range(8)), "pod": f"gang-{r}"} for r in range(2)]
        plan = {
            "phase": "Planned", "generation": 1, "ranks": ranks, "nodes": ["hgx-h100-0", "hgx-h100-1"],
            "nodeCount": 2, "gpuCount": 16, "estimatedBusBandwidthGBps": 179.5,
            "bottleneck": "inter-node: 8 x 400 Gb/s NICs per node", "tier": 0, "missingRanks": [], "restarts": 0,
            "plannedAt": "2026-01-01T00:00:00+00:00",
        }  # fmt: skip

        kinds: dict[str, Callable[[int], Any]] = {
            "NodeTopology status, server-side apply (8 kB)": lambda i: custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "nodetopologies", applied,
                {**head, "metadata": {"name": applied}, "status": {**status, "observedAt": stamp(i)}},
                field_manager="gputopo-probe", force=True, _content_type="application/apply-patch+yaml",
            ),
            "NodeTopology status, merge patch (8 kB)": lambda i: custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "nodetopologies", merged, {"status": {**status, "observedAt": stamp(i)}},
                _content_type="application/merge-patch+json",
            ),
            "NodeTopology status, observedAt only": lambda i: custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "nodetopologies", stamped, {"status": {"observedAt": stamp(i)}},
                _content_type="application/merge-patch+json",
            ),
            "NodePodGpus status, server-side apply (4 pods)": lambda i: custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "nodepodgpus", "pods",
                {**pods_head, "metadata": {"name": "pods"}, "status": {"pods": pods, "observedAt": stamp(i)}},
                field_manager="gputopo-probe", force=True, _content_type="application/apply-patch+yaml",
            ),
            "TrainingJob status, merge patch": lambda i: custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NS, "trainingjobs", "job", {"status": {"phase": "Pending", "message": f"m{i}"}},
                _content_type="application/merge-patch+json",
            ),
            "TrainingJob created": lambda i: custom.create_namespaced_custom_object(
                GROUP, VERSION, NS, "trainingjobs", {**job, "metadata": {"name": f"job-{i}", "namespace": NS}}
            ),
            "GangPlacement created": lambda i: custom.create_namespaced_custom_object(
                GROUP, VERSION, NS, "gangplacements", record(i)
            ),
            "GangPlacement status, merge patch (a 2-rank plan)": lambda i: custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NS, "gangplacements", "podgroup-gang--1", {"status": {**plan, "message": f"m{i}"}},
                _content_type="application/merge-patch+json",
            ),
            "pod created": lambda i: core.create_namespaced_pod(NS, pod(i)),
            "pod labels patched": lambda i: core.patch_namespaced_pod(
                f"p{i}", NS, {"metadata": {"labels": {"seen": "yes"}}}
            ),
            "gated pod steered (JSON patch)": lambda i: core.patch_namespaced_pod(  # a list: a JSON patch
                f"g{i}", NS, steer_patch(gated[i], f"node-{i % 2}", (i % 8,), 1, gang)
            ),
        }  # fmt: skip
        return {kind: measure(apiserver, args.writes, write) for kind, write in kinds.items()}
    finally:
        box.down()


def markdown(report: dict[str, Any]) -> str:
    rows = report["results"]
    pod = rows["pod created"]["apiserver_ms"]
    lines = [
        "# What one write costs the API server",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}",
        "",
        f"Each kind written {report['writes']} times in a row on a sandbox where nothing else writes; the API "
        "server's CPU and the wall time per write.",
        "",
        "| write | API server CPU (ms) | wall (ms) | CPU against a pod created |",
        "|---|---|---|---|",
    ]
    for kind, row in rows.items():
        cpu, wall = row["apiserver_ms"], row["wall_ms"]
        lines.append(f"| {kind} | {cpu:.1f} | {wall:.1f} | {cpu / pod:.1f} x |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="bench-api-writes")
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    report = {**report_head(["bench/bench_api_writes.py", *sys.argv[1:]]), "writes": args.writes}
    report["results"] = run(args)
    write_report("api_writes", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
