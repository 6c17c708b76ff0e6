"""How long a large ``--gpu-allocation dra`` sandbox takes to be usable: ``Sandbox.up`` (every node's
NodeTopology published), then every node's ResourceSlice (with devices) and every node's gputopo labels.

The fake probes publish a node's NodeTopology, then its ResourceSlice, then its labels, in one write cycle;
a slice the API server refuses holds back that node's labels and is retried with a backoff.

Writes bench/reports/dra_sandbox.{json,md}.
Run: python bench/bench_dra_sandbox.py [--nodes 1000 --deadline 240]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gputopo.api.labels import LABEL_GPU_COUNT
from gputopo.sandbox import Sandbox
from reporting import report_head, write_report


def count(box: Sandbox) -> tuple[int, int]:
    """(nodes with a ResourceSlice that has devices, nodes with gputopo's GPU count label)."""
    slices = json.loads(box.kubectl("get", "resourceslices", "-o", "json", timeout=120))["items"]
    nodes = json.loads(box.kubectl("get", "nodes", "-o", "json", timeout=120))["items"]
    with_devices = sum(1 for s in slices if s["spec"].get("devices"))
    labelled = sum(1 for n in nodes if LABEL_GPU_COUNT in (n["metadata"].get("labels") or {}))
    return with_devices, labelled


def measure(args: argparse.Namespace) -> dict[str, Any]:
    box = Sandbox(args.sandbox)
    t0 = time.monotonic()
    try:
        box.up(nodes=args.nodes, profile="mixed", probes=True, wait=args.deadline, gpu_allocation="dra")
        up_s = time.monotonic() - t0
        slices_s = labels_s = None
        slices = labelled = 0
        while time.monotonic() - t0 < args.deadline:
            slices, labelled = count(box)
            now = time.monotonic() - t0
            if slices >= args.nodes and slices_s is None:
                slices_s = now
            if labelled >= args.nodes and labels_s is None:
                labels_s = now
            if slices_s is not None and labels_s is not None:
                break
            time.sleep(2.0)
        refused = sum(1 for line in (box.log_dir / "probe-farm.log").read_text().splitlines() if "HTTP 422" in line)
        return {
            "nodes": args.nodes,
            "up_s": up_s,
            "all_slices_s": slices_s,
            "all_labels_s": labels_s,
            "nodes_with_slice": slices,
            "nodes_labelled": labelled,
            "slice_writes_refused": refused,
        }
    finally:
        box.down()


def markdown(report: dict[str, Any]) -> str:
    r = report["result"]

    def t(value: float | None) -> str:
        return f"{value:.1f} s" if value is not None else f"not within {report['deadline_s']:.0f} s"

    return "\n".join(
        [
            "# A large DRA sandbox: time until usable",
            "",
            f"Command: `{report['command']}`  ",
            f"Machine: {report['machine']}",
            "",
            f"`mixed` profile, {r['nodes']} nodes, fake probes publishing NodeTopologies and ResourceSlices.",
            "",
            "| | seconds from the start of `up` |",
            "|---|---|",
            f"| `Sandbox.up` returns (every NodeTopology) | {r['up_s']:.1f} s |",
            f"| every node has its ResourceSlice ({r['nodes_with_slice']} of {r['nodes']}) | {t(r['all_slices_s'])} |",
            f"| every node has its labels ({r['nodes_labelled']} of {r['nodes']}) | {t(r['all_labels_s'])} |",
            "",
            f"Slice writes the API server refused (HTTP 422 in the probe farm's log): {r['slice_writes_refused']}.",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="bench-dra-sandbox")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--deadline", type=float, default=240.0, help="longest wait from the start of up (s)")
    args = parser.parse_args()
    report = {
        **report_head(["bench/bench_dra_sandbox.py", *sys.argv[1:]]),
        "deadline_s": args.deadline,
        "result": measure(args),
    }
    write_report("dra_sandbox", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
