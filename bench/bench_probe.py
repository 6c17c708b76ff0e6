"""Node probe speed and footprint: CPU of one poll of a fake 8-GPU node, resident memory of a probe
process, and a farm of 1,000 fake probes at a 1 s interval in one process.

Writes bench/reports/probe.{json,md}.  Run: python bench/bench_probe.py [--farm-nodes 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gputopo.sandbox.processes import rss_mib
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.fake.faults import FaultStore
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.farm import FarmNode, build_member
from gputopo_probe.nvml import Nvml
from gputopo_probe.probe import Probe
from gputopo_probe.runner import Runner
from gputopo_probe.source import load_fake_topology

ROOT = Path(__file__).resolve().parents[1]
REPORTS = Path(__file__).parent / "reports"
FIXTURES = ROOT / "operator" / "gputopo" / "topology" / "fixtures" / "nvidia-smi"
EIGHT_GPU = [
    "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt",
    "dgx-a100-8gpu-nv12-10xmlx5.txt",
    "dgx1-v100-8gpu-cubemesh-4xmlx5.txt",
    "8xRTX4090-pcie-dual-socket-all-sys.txt",
]


def poll_cpu(runs: int) -> list[dict[str, Any]]:
    rows = []
    for name in EIGHT_GPU:
        topology = load_fake_topology(str(FIXTURES / name))
        with tempfile.TemporaryDirectory() as faults:
            node = FakeNode("bench", topology, faults=FaultStore(faults))
            probe = Probe(Nvml(node.nvml), Sysfs(node.sysfs_root), xid_thread=False, before_poll=node.sync_faults)
            for _ in range(20):
                probe.poll()
            samples = []
            for _ in range(runs):
                start = time.process_time()
                poll = probe.poll()
                samples.append((time.process_time() - start) * 1000)
            start = time.process_time()
            for _ in range(runs):
                poll.status().to_api()
            status_ms = (time.process_time() - start) * 1000 / runs
            probe.close()
            node.close()
        rows.append({
            "topology": name.removesuffix(".txt"),
            "gpus": topology.gpu_count,
            "nics": len(topology.nics),
            "poll_cpu_ms_median": statistics.median(samples),
            "poll_cpu_ms_p90": statistics.quantiles(samples, n=10)[8],
            "status_build_ms": status_ms,
        })  # fmt: skip
    return rows


def probe_process_rss(seconds: float) -> dict[str, Any]:
    """A real ``gputopo-probe`` process (fake NVML, unreachable API server: it keeps polling and retrying)."""
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "current-context: x\n"
        )
        argv = [sys.executable, "-m", "gputopo_probe.main", "--fake", str(FIXTURES / EIGHT_GPU[0]),
                "--node-name", "bench", "--interval", "0.5", "--listen", "127.0.0.1:0",
                "--kubeconfig", str(kubeconfig)]  # fmt: skip
        env = {**os.environ, "GPUTOPO_PROBE_TEST_CLUSTER": "true"}  # fake mode publishes only on test clusters
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            time.sleep(seconds)  # a benchmark waits for a steady state; tests never do this
            alive = proc.poll() is None
            rss, hwm = rss_mib(proc.pid) if alive else (0.0, 0.0)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return {"alive_after_s": seconds if alive else 0, "rss_mib": rss, "peak_rss_mib": hwm}


class NullKube:
    """Accepts every write: the farm's API cost is not measured here, only the probes'."""

    def __init__(self) -> None:
        self.writes = 0

    def node_uid(self, name: str) -> str:
        return "uid"

    def apply_node_topology(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        self.writes += 1

    def apply_node_pod_gpus(self, name: str, node_uid: str, status: dict[str, Any]) -> None:
        self.writes += 1

    def apply_node_labels(self, name: str, labels: dict[str, str]) -> None:
        self.writes += 1

    def foreign_label(self, name: str, key: str) -> str | None:
        return None

    def node_event(self, node: str, node_uid: str, *, reason: str, message: str, warning: bool) -> None:
        self.writes += 1


def farm(nodes: int, ticks: int) -> dict[str, Any]:
    files = sorted(FIXTURES.glob("*.txt"))
    topologies = {f.name: load_fake_topology(str(f)) for f in files}
    rss_before = rss_mib()[0]
    kube = NullKube()
    with tempfile.TemporaryDirectory() as fault_dir:
        store = FaultStore(fault_dir)
        runner = Runner(1.0, publish_workers=4)
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(nodes):
            name = files[i % len(files)].name
            spec = FarmNode(f"node-{i:04d}", name)
            member = build_member(spec, topologies[name], kube=kube, faults=store, allocator=None,
                                  down_after=2, up_after=2, heartbeat_s=60.0)  # fmt: skip
            runner.add(member)
        build_s, build_cpu = time.perf_counter() - start, time.process_time() - cpu

        def timed_tick() -> tuple[float, float]:
            t0, c0 = time.perf_counter(), time.process_time()
            runner.tick()
            return time.perf_counter() - t0, time.process_time() - c0

        first = timed_tick()
        quiet = [timed_tick() for _ in range(ticks)]
        faulty = [m.node for m in runner.members[:: max(1, nodes // 50)]]  # 50 nodes
        for node in faulty:
            store.link(node, 0, 1, "down")
        with_faults = [timed_tick() for _ in range(3)]
        down = sum(1 for m in runner.members if m.node in faulty and m.probe._last
                   and m.probe._last.topology.link(0, 1).state.value == "Down")  # fmt: skip
        for m in runner.members:  # worst case: every probe reads its hardware, as a real node does
            m.probe.quiet = None
            m.probe.before_poll = None
        full = [timed_tick() for _ in range(2)]
        rss_after, hwm = rss_mib()
        runner.close()
    return {
        "nodes": nodes,
        "interval_s": 1.0,
        "build_s": build_s,
        "build_cpu_s": build_cpu,
        "first_tick_s": first[0],
        "quiet_tick_wall_s_median": statistics.median(t for t, _ in quiet),
        "quiet_tick_cpu_s_median": statistics.median(c for _, c in quiet),
        "fault_tick_wall_s_max": max(t for t, _ in with_faults),
        "faulty_nodes": len(faulty),
        "faults_seen_within_3_ticks": down,
        "full_poll_tick_wall_s": statistics.median(t for t, _ in full),
        "full_poll_tick_cpu_s": statistics.median(c for _, c in full),
        "rss_mib_for_farm": rss_after - rss_before,
        "process_peak_rss_mib": hwm,
        "api_writes": kube.writes,
    }


def markdown(report: dict[str, Any]) -> str:
    poll_header = "| topology | GPUs | NICs | poll CPU median (ms) | p90 (ms) | status build (ms) |"
    lines = ["# Node probe: speed and footprint", "", f"Command: `{report['command']}`  "]
    lines += [f"Machine: {report['machine']}", "", "## One poll of a fake 8-GPU node (CPU time; target < 5 ms)", ""]
    lines += [poll_header, "|---|---|---|---|---|---|"]
    for r in report["poll"]:
        lines.append(
            f"| {r['topology']} | {r['gpus']} | {r['nics']} | {r['poll_cpu_ms_median']:.2f} | "
            f"{r['poll_cpu_ms_p90']:.2f} | {r['status_build_ms']:.2f} |"
        )
    p = report["process"]
    lines += [
        "",
        "## Resident memory of one probe process (target < 60 MB)",
        "",
        f"`gputopo-probe --fake hgx-h100 …` after {p['alive_after_s']:.0f} s of polling: "
        f"RSS {p['rss_mib']:.1f} MiB, peak {p['peak_rss_mib']:.1f} MiB.",
        "",
    ]
    f = report["farm"]
    rows = [
        (
            "build all nodes (fake NVML, sysfs tree, discovery)",
            f"{f['build_s']:.1f} s wall, {f['build_cpu_s']:.1f} s CPU",
        ),
        ("first tick (every node polled and published)", f"{f['first_tick_s']:.2f} s"),
        (
            "steady tick, hardware unchanged (median)",
            f"{f['quiet_tick_wall_s_median']:.3f} s wall, {f['quiet_tick_cpu_s_median']:.3f} s CPU",
        ),
        (f"tick with link faults on {f['faulty_nodes']} nodes (max of 3)", f"{f['fault_tick_wall_s_max']:.3f} s"),
        (
            "faulty nodes whose link read Down within 3 ticks",
            f"{f['faults_seen_within_3_ticks']} of {f['faulty_nodes']}",
        ),
        (
            "worst case: every node reads all its fake hardware",
            f"{f['full_poll_tick_wall_s']:.2f} s wall, {f['full_poll_tick_cpu_s']:.2f} s CPU per tick",
        ),
        ("memory of the farm", f"{f['rss_mib_for_farm']:.0f} MiB (process peak {f['process_peak_rss_mib']:.0f} MiB)"),
    ]
    lines += [f"## A farm of {f['nodes']} fake probes at a {f['interval_s']:.0f} s interval, one process", ""]
    lines += ["| measure | value |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows], ""]
    lines += [
        "A farm reuses the last poll of a fake node whose fault file did not change, whose error counters are not "
        "climbing and whose hysteresis is settled (a new poll would give the same outcome); every fault goes "
        "through the full discovery and hysteresis path. The API is a sink here; publishing is on change only, "
        "plus a heartbeat every 60 s per node.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--farm-nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    report = {
        "command": "python bench/bench_probe.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} CPUs (shared), Python {sys.version.split()[0]}",
        "poll": poll_cpu(args.runs),
        "process": probe_process_rss(8.0),
        "farm": farm(args.farm_nodes, ticks=5),
        "max_rss_mib_of_bench": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "probe.json").write_text(json.dumps(report, indent=2) + "\n")
    (REPORTS / "probe.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
