"""Topology core speed: estimating a GPU set, ranking every group of every size, and the calibration table.

Targets (issue 3): estimating an 8-GPU set < 1 ms; ranking all groups of every size on an 8-GPU node < 5 ms;
on a 16-GPU NVSwitch node < 50 ms. "Cold" is a topology never seen before; "same type" a new object of known
content (another node of a type); "warm" the same object again. Times are per run, in ms; the machine's load
average and a reference loop are recorded beside them, since a shared machine slows everything down.
Writes bench/reports/topology.{json,md}.  Run: python bench/bench_topology.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology import Gpu, Link, SystemFacts, Topology, estimate_node, load_node_type, well_connected_groups
from gputopo.topology.calibration import (
    Result,
    calibrate,
    calibrate_grace,
    calibrate_nvl72,
    format_table,
    median_error,
)
from gputopo.topology.estimate import clear_shared_tables

REPORTS = Path(__file__).parent / "reports"
EIGHT_GPU_TYPES = ("hgx-h100", "dgx-a100", "h100-nvl-pairs", "dgx1-v100", "rtx4090-pcie")
# Goals for the Grace and Blackwell rows: median error within 15%, none beyond 30%.
GRACE_BLACKWELL_MEDIAN = 0.15
GRACE_BLACKWELL_MAX = 0.30


def _blackwell(results: list[Result]) -> list[Result]:
    """The rows of the main table on Grace or Blackwell GPUs (GH200, B200, B300)."""
    return [r for r in results if any(name in r.system for name in ("GH200", "B200", "B300"))]


def grace_blackwell_rows(results: list[Result], nvl72: list[Result], grace: list[Result]) -> list[tuple[str, Result]]:
    """Every Grace or Blackwell row with the table it comes from."""
    rows = [("main", r) for r in _blackwell(results)]
    rows += [("nvl72", r) for r in nvl72]
    rows += [("grace matrix", r) for r in grace]
    return rows


def _rows_doc(rows: list[Result]) -> list[dict[str, object]]:
    return [
        {"row": r.row, "predicted": r.predicted, "published": r.published, "error": r.error, "set_aside": r.set_aside}
        for r in rows
    ]


def fresh(t: Topology) -> Topology:
    """The same node as a new object, with nothing memoised or shared yet (the first decision about it)."""
    clear_shared_tables()
    return Topology(t.gpus, t.links, t.nics, t.system)


def another(t: Topology) -> Topology:
    """Another node of the same type: a new object whose content the shared tables already know."""
    return Topology(t.gpus, t.links, t.nics, t.system)


def nvswitch16(model: str = "NVIDIA H100 80GB HBM3", nvlinks: int = 18) -> Topology:
    gpus = [Gpu(i, model=model, numa_node=i // 8) for i in range(16)]
    links = [Link(a, b, LinkKind.NVSWITCH, nvlinks) for a in range(16) for b in range(a + 1, 16)]
    return Topology.build(gpus, links, (), SystemFacts(nvswitch=True))


def degraded16() -> Topology:
    t = nvswitch16()
    for b in range(16):
        if b != 5:
            t = t.with_link_state(5, b, LinkState.DEGRADED, nvlinks=17)
    return t


def measure(
    make: Callable[[], Topology], work: Callable[[Topology], object], runs: int, cache: str
) -> dict[str, float]:
    """Time ``work`` on a topology that is ``cold`` (new content), ``same type`` (known content, new
    object) or ``warm`` (the very object again)."""
    shared = make()
    work(shared)
    times = []
    for _ in range(runs):
        t = fresh(shared) if cache == "cold" else another(shared) if cache == "same type" else shared
        start = time.perf_counter()
        work(t)
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "runs": runs}


def rank_all(limit: int | None) -> Callable[[Topology], int]:
    def work(t: Topology) -> int:
        return sum(len(well_connected_groups(t, range(t.gpu_count), k, limit=limit)) for k in range(1, t.gpu_count + 1))

    return work


def reference_ms() -> float:
    """This machine's speed: ms for ``sum(range(10**6))`` (about 10-15 ms on a current desktop CPU)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        sum(range(1_000_000))
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def main() -> None:
    rows: list[dict[str, object]] = []
    caches = ("cold", "same type", "warm")
    for name in EIGHT_GPU_TYPES:
        topology = load_node_type(name)
        for cache in caches:
            est = measure(lambda topology=topology: topology, lambda t: estimate_node(t, range(8)), 200, cache)
            rows.append({"what": "estimate 8-GPU set", "node": name, "cache": cache, **est})
        for cache in caches:
            r = measure(lambda topology=topology: topology, rank_all(None), 50 if cache == "cold" else 200, cache)
            rows.append({"what": "rank all groups, every size", "node": name, "cache": cache, **r})
    for label, make in (("16x H100 NVSwitch", nvswitch16), ("16x H100 NVSwitch, GPU5 degraded", degraded16)):
        for limit in (None, 100, 1):
            for cache in caches:
                r = measure(make, rank_all(limit), 10 if cache == "cold" and limit is None else 30, cache)
                what = "rank all groups, every size" + ("" if limit is None else f" (limit={limit})")
                rows.append({"what": what, "node": label, "cache": cache, **r})
        est = measure(make, lambda t: estimate_node(t, range(16)), 100, "cold")
        rows.append({"what": "estimate 16-GPU set", "node": label, "cache": "cold", **est})
    results = calibrate()
    nvl72 = calibrate_nvl72()
    grace = calibrate_grace()
    gb_rows = grace_blackwell_rows(results, nvl72, grace)
    gb_errors = [r.error for _, r in gb_rows if r.error is not None]
    gb_median = statistics.median(gb_errors)
    gb_max = max(gb_errors)
    gb_met = gb_median <= GRACE_BLACKWELL_MEDIAN and gb_max <= GRACE_BLACKWELL_MAX
    reference = reference_ms()
    doc = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "reference_ms": reference,
        },
        "timings": rows,
        "calibration": [
            {
                "row": r.row,
                "predicted": r.predicted,
                "published": r.published,
                "error": r.error,
                "set_aside": r.set_aside,
            }
            for r in results
        ],
        "calibration_median_error": median_error(results),
        "calibration_nvl72": [
            {
                "row": r.row,
                "predicted": r.predicted,
                "published": r.published,
                "error": r.error,
                "set_aside": r.set_aside,
            }
            for r in nvl72
        ],
        "calibration_nvl72_median_error": median_error(nvl72),
        "calibration_grace_matrix": _rows_doc(grace),
        "grace_blackwell": {
            "rows": [{"table": table, **_rows_doc([r])[0]} for table, r in gb_rows],
            "median_error": gb_median,
            "max_error": gb_max,
            "goal": {"median": GRACE_BLACKWELL_MEDIAN, "max": GRACE_BLACKWELL_MAX, "met": gb_met},
        },
    }
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "topology.json").write_text(json.dumps(doc, indent=2))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "# Topology core: speed and calibration",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load} while it ran; "
        f"`sum(range(10**6))` takes {reference:.1f} ms here (about 10-15 ms on a current desktop CPU).",
        "",
        "Cold: a topology never seen before (fresh object, shared tables cleared); same type: a new object for a",
        "node whose content is known (another node of the type: the operator's common case); warm: the same object.",
        "",
        "| what | node | cache | median ms | min ms | runs |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['what']} | {row['node']} | {row['cache']} | {row['median_ms']:.3f} | {row['min_ms']:.3f} "
            f"| {row['runs']} |"
        )
    lines += ["", "## Calibration against published nccl-tests results", "", format_table(results), ""]
    lines += [
        "## GB200 NVL72 (multi-node NVLink domains) against published nccl-tests results",
        "",
        "Sources in `operator/gputopo/topology/fixtures/nvl72-busbw-calibration.tsv`; GB200 trays spread evenly",
        "over the rows' racks (`gputopo.topology.calibration.calibrate_nvl72`).",
        "",
        format_table(nvl72),
        "",
        "## GB200 trays read from nvidia-smi matrices (NVIDIA/nccl#1801 rows, NCCL 2.27.3)",
        "",
        "The tray matrix of `gb200-tray-4gpu-6nic-all-sys-PARTIAL.txt` completed from its `# system:` line (every",
        "GPU-NIC cell SYS) and one with its 4 NICs NODE to their Grace, read by the importer",
        "(`gputopo.topology.calibration.calibrate_grace`): GPUDirect RDMA through NVLink-C2C to the NICs of each",
        "GPU's own Grace. Before NCCL 2.27.3 the same trays give 112.8 (all SYS) and 141.0 GB/s (NODE).",
        "",
        format_table(grace),
        "",
        "## Grace and Blackwell rows: goal",
        "",
        f"{len(gb_errors)} rows (GH200, B200 and B300 rows of the main table, every NVL72 row, the tray-matrix "
        f"rows): median error {gb_median:.1%} (goal <= {GRACE_BLACKWELL_MEDIAN:.0%}), largest {gb_max:.1%} "
        f"(goal <= {GRACE_BLACKWELL_MAX:.0%}): {'met' if gb_met else 'NOT met'}.",
        "",
    ]
    (REPORTS / "topology.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
