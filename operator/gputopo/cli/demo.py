"""`gputopo demo`: the sandbox with a mix of GPU node types, the operator, the example jobs — where each
landed and its estimated bus bandwidth — then a link failure under a running job, re-placed live, and an urgent
production job that preempts a research job for its node.
"""

from __future__ import annotations

import json
import random
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from gputopo.control.facts import JobFacts
from gputopo.sandbox import DEFAULT_NAME, Sandbox, SandboxError
from gputopo.sandbox.admission import enable_gating
from gputopo.sandbox.faults import link_fault

__all__ = ["NODES", "Order", "arrival_order", "register"]

# Three spines of the mixed profile: 14 NVSwitch nodes, two spines with 4 HGX H100 each. The examples together want 9
# whole NVSwitch nodes (the TrainingJobs 7, the Indexed Job 2) and 4 H100 nodes under one spine: with 16 nodes (8
# NVSwitch nodes, one such spine) the gang served last never fits, and which one that is depends on the order the
# examples arrive in. With 24 each is placed whatever the order (tests/unit/cli/test_demo_orders.py).
NODES = 24
NAMESPACE = "demo"
PRIORITY_CLASSES = "priority-classes.yaml"
VICTIM = "llama-8gpu"  # a research job of examples/ on one whole NVSwitch node
# Wide enough for the placement table even when the output is a pipe or a CI log.
console = Console(width=max(Console().width, 150))


def _examples_dir() -> Path:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "examples"
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise SandboxError("examples/ not found; run the demo from a gputopo source checkout")


class Order(StrEnum):
    """In which order the demo applies the examples (the PriorityClasses always first: the jobs name them)."""

    NAME = "name"
    REVERSE = "reverse"
    SHUFFLED = "shuffled"


def arrival_order(examples: Path, order: Order, rng: random.Random | None = None) -> list[Path]:
    """The example manifests the demo applies (``examples/*.yaml``), in ``order``, the PriorityClasses first."""
    paths = sorted(p for p in examples.glob("*.yaml") if p.name != PRIORITY_CLASSES)
    if order is Order.REVERSE:
        paths.reverse()
    elif order is Order.SHUFFLED:
        (rng or random.Random()).shuffle(paths)
    first = examples / PRIORITY_CLASSES
    return [first, *paths] if first.is_file() else paths


def _apply_examples(box: Sandbox, examples: Path, order: Order) -> int:
    """Apply the examples in ``order``; returns how many gangs gputopo does not own they declare."""
    gangs = 0
    for path in arrival_order(examples, order):
        box.kubectl("apply", "-n", NAMESPACE, "-f", str(path))
        gangs += _gang_documents(path)
        console.print(f"applied {path.name}")
    return gangs


def _jobs(box: Sandbox) -> list[dict[str, Any]]:
    items = json.loads(box.kubectl("get", "trainingjobs", "-n", NAMESPACE, "-o", "json"))["items"]
    return sorted(items, key=lambda j: j["metadata"]["name"])


def _gang_documents(path: Path) -> int:
    """How many gangs gputopo does not own (anything but a TrainingJob) a manifest declares."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return sum(1 for d in docs if d.get("kind") != "TrainingJob")


def _rank_gpus(ranks: list[dict[str, Any]]) -> str:
    """``r0:0,1; r1:2,3``: each rank's GPU indices, the first four ranks."""
    cells = "; ".join(f"r{r['rank']}:{','.join(map(str, r.get('gpus', [])))}" for r in ranks[:4])
    return cells + (f"; … {len(ranks) - 4} more" if len(ranks) > 4 else "")


def _node_list(nodes: list[str]) -> str:
    return ", ".join(nodes[:4]) + (" …" if len(nodes) > 4 else "")


def _busbw(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and value > 0 else "-"


def _placement_cells(job: dict[str, Any]) -> tuple[str, str, str, str]:
    placement = (job.get("status") or {}).get("placement") or {}
    workers = placement.get("workers") or []
    return (
        _node_list(sorted({w["node"] for w in workers})),
        _rank_gpus(workers),
        _busbw(placement.get("estimatedBusBandwidthGBps")),
        placement.get("bottleneck", ""),
    )


def job_table(jobs: list[dict[str, Any]]) -> Table:
    """The TrainingJobs (``kubectl get trainingjobs -o json``'s items): where each runs, or why it waits."""
    table = Table(title="TrainingJobs in the sandbox", header_style="bold")
    for column in ("job", "phase", "gang", "nodes", "GPUs (rank:indices)", "busbw GB/s", "bottleneck", "why"):
        table.add_column(column)
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        status = job.get("status") or {}
        spec = job["spec"]
        waiting = next((c.get("message", "") for c in status.get("conditions", []) if c.get("status") == "False"), "")
        table.add_row(
            job["metadata"]["name"],
            status.get("phase", "Pending"),
            f"{spec['workers']}x{spec['gpusPerWorker']}",
            *_placement_cells(job),
            waiting[:60] if status.get("phase") not in ("Running", "Succeeded") else "",
        )
    return table


# How a gang's nodes read in its phase: a Released record keeps the ranks it ran on.
WHERE = {"Running": "runs on", "Released": "ran on", "Planned": "placed on", "Restarting": "ran on"}
# Phases a gang stays in until something changes: the demo waits for one of them.
GANG_SETTLED = ("Running", "Released", "Unplaceable", "Refused")


def gang_row(gang: dict[str, Any]) -> tuple[str, str, str, str, str, str, str]:
    """One GangPlacement (``kubectl get gangplacements -o json``'s item) as the gang table's cells: gang, source,
    phase, nodes (``runs on`` / ``ran on`` ...), GPUs per rank, estimated bus bandwidth, bottleneck or message."""
    spec = gang.get("spec") or {}
    status = gang.get("status") or {}
    phase = status.get("phase") or "Pending"
    ranks = sorted(status.get("ranks") or [], key=lambda r: r["rank"])
    nodes = list(dict.fromkeys(r["node"] for r in ranks)) or list(status.get("nodes") or [])
    where = f"{WHERE.get(phase, 'on')} {_node_list(nodes)}" if nodes else "-"
    size = spec.get("size")
    name = f"{spec.get('gang', gang['metadata']['name'])}" + (f" ({size} ranks)" if size else "")
    why = "" if phase in ("Running", "Released") else str(status.get("message", ""))[:60]
    return (
        name,
        str(spec.get("source", "")),
        phase,
        where,
        _rank_gpus(ranks) if ranks else "-",
        _busbw(status.get("estimatedBusBandwidthGBps")) if ranks else "-",
        status.get("bottleneck") or why,
    )


def gang_table(gangs: list[dict[str, Any]]) -> Table:
    """The gangs gputopo placed without owning them (Indexed Jobs, PodGroups, JobSets, ...), by GangPlacement."""
    table = Table(title="Gangs gputopo placed (kubectl get gangs)", header_style="bold")
    for column in ("gang", "source", "phase", "nodes", "GPUs (rank:indices)", "busbw GB/s", "bottleneck or why"):
        table.add_column(column)
    for gang in sorted(gangs, key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"]["name"])):
        table.add_row(*gang_row(gang))
    return table


def gangs_settled(gangs: list[dict[str, Any]], expected: int) -> bool:
    """At least ``expected`` gangs on record, each in a phase it keeps until something changes."""
    phases = [(g.get("status") or {}).get("phase") for g in gangs]
    return len(phases) >= expected and all(p in GANG_SETTLED for p in phases)


def _gangs(box: Sandbox) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(box.kubectl("get", "gangplacements", "-n", NAMESPACE, "-o", "json"))[
        "items"
    ]
    return items


def _wait_gangs(box: Sandbox, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not gangs_settled(_gangs(box), expected):
        time.sleep(1)


def _settled(job: dict[str, Any]) -> bool:
    """Running or finished, or waiting with the engine's reason written on it."""
    status = job.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    return any(c.get("status") == "False" and c.get("message") for c in status.get("conditions", []))


# A job left waiting counts as settled once it has waited this long unchanged: longer than the operator's control
# pass without events (2 s), so a pass that could place it (GPUs another gang just let go) has run.
STABLE_SECONDS = 3.0


def _done(job: dict[str, Any]) -> bool:
    return (job.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")


def _wait_settled(box: Sandbox, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting_since: float | None = None
    seen: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        jobs = _jobs(box)
        if jobs and all(_done(j) for j in jobs):
            return
        state = [(j["metadata"]["name"], (j.get("status") or {}).get("phase", "")) for j in jobs]
        if not jobs or not all(_settled(j) for j in jobs) or state != seen:
            waiting_since = None
        elif waiting_since is None:
            waiting_since = time.monotonic()
        elif time.monotonic() - waiting_since >= STABLE_SECONDS:
            return
        seen = state
        time.sleep(0.5)


def _fail_a_link(box: Sandbox, timeout: float) -> None:
    running = [
        j
        for j in _jobs(box)
        if (j.get("status") or {}).get("phase") == "Running"
        and j["spec"]["workers"] == 1
        and j["spec"]["gpusPerWorker"] >= 2
    ]
    if not running:
        console.print("[yellow]no single-node job is running; skipping the link failure[/]")
        return
    job = running[0]
    name = job["metadata"]["name"]
    worker = job["status"]["placement"]["workers"][0]
    node, gpus = worker["node"], worker["gpus"]
    restarts = job["status"].get("restarts", 0)
    console.rule(f"[bold]Link failure under {name}: {node} GPU{gpus[0]}-GPU{gpus[1]} goes down")
    t0 = time.monotonic()
    link_fault(box, node, gpus[0], gpus[1], "down")
    seen_phase = ""
    while time.monotonic() - t0 < timeout:
        current = json.loads(box.kubectl("get", "trainingjob", name, "-n", NAMESPACE, "-o", "json"))
        status = current.get("status") or {}
        if status.get("phase") != seen_phase:
            seen_phase = status.get("phase", "")
            console.print(f"  +{time.monotonic() - t0:5.2f} s  phase {seen_phase}")
        if status.get("restarts", 0) > restarts and status.get("phase") == "Running":
            new = status["placement"]["workers"][0]
            console.print(
                f"[green]re-placed in {time.monotonic() - t0:.2f} s[/]: {node} GPUs {gpus} → "
                f"{new['node']} GPUs {new['gpus']}, restarts {status['restarts']}, "
                f"estimated bus bandwidth {status['placement']['estimatedBusBandwidthGBps']:.1f} GB/s"
            )
            return
        time.sleep(0.2)
    console.print(f"[red]{name} was not re-placed within {timeout:.0f} s[/]; see the operator log")


def _job(box: Sandbox, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(box.kubectl("get", "trainingjob", name, "-n", NAMESPACE, "-o", "json"))
    return found


def _condition(job: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _preempt(box: Sandbox, manifest: Path, timeout: float) -> None:
    """Pin the urgent production job to the node of the research job llama-8gpu, and show the preemption."""
    victim = _job(box, VICTIM)
    workers = ((victim.get("status") or {}).get("placement") or {}).get("workers") or []
    if (victim.get("status") or {}).get("phase") != "Running" or not workers:
        console.print(f"[yellow]{VICTIM} is not running; skipping the preemption[/]")
        return
    node = workers[0]["node"]
    urgent = yaml.safe_load(manifest.read_text())
    urgent["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    name = urgent["metadata"]["name"]
    console.rule(f"[bold]{name} (class production) needs {node}, where {VICTIM} (class research) runs")
    t0 = time.monotonic()
    box.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(urgent))
    seen: tuple[str, str] = ("", "")
    while time.monotonic() - t0 < timeout:
        mine, theirs = _job(box, name), _job(box, VICTIM)
        now = (_condition(mine, "Placed").get("reason", ""), _condition(theirs, "Preempted").get("status", ""))
        if now != seen:
            seen = now
            console.print(
                f"  +{time.monotonic() - t0:5.2f} s  {name}: {(mine.get('status') or {}).get('phase', '')} "
                f"({now[0] or '-'}), {VICTIM}: {(theirs.get('status') or {}).get('phase', '')}"
                f"{', Preempted' if now[1] == 'True' else ''}"
            )
        placed = ((mine.get("status") or {}).get("placement") or {}).get("workers") or []
        if (mine.get("status") or {}).get("phase") == "Running" and placed:
            preempted = _condition(theirs, "Preempted")
            console.print(
                f"[green]{name} running on {placed[0]['node']} after {time.monotonic() - t0:.2f} s[/]: "
                f"{VICTIM} {preempted.get('message', 'was not preempted')}; its restarts "
                f"{(theirs.get('status') or {}).get('restarts', 0)} (a preemption charges none)"
            )
            return
        time.sleep(0.2)
    console.print(f"[red]{name} did not run within {timeout:.0f} s[/]; see the operator log")


def _gpus(job: JobFacts) -> tuple[int, str]:
    return ((job.spec.workers * job.spec.gpus_per_worker) if job.spec is not None else 0, job.name)


def _explain_pending(box: Sandbox) -> None:
    """`kubectl gputopo explain` on the demo's first pending job (else its widest), and where the live map is served."""
    from gputopo.cli.kubectl import find
    from gputopo.cli.live import read_live
    from gputopo.kube.errors import KubeError

    try:
        read = read_live(str(box.kubeconfig))
    except KubeError as error:
        console.print(f"[yellow]cannot read the sandbox for `kubectl gputopo explain`: {error}[/]")
        return
    ours = [j for j in read.cluster.jobs if j.namespace == NAMESPACE]
    waiting = [j for j in ours if find(read, j.name, NAMESPACE).pending]
    # With nothing pending, the widest running job: where it sits, its bus bandwidth, bottleneck and links.
    shown = waiting[0] if waiting else max(ours, key=_gpus, default=None)
    if shown is None:
        console.print("no job of the demo to explain: `kubectl gputopo explain <job> -n demo`")
    else:
        console.rule(f"[bold]kubectl gputopo explain {shown.name} -n {NAMESPACE}")
        for line in find(read, shown.name, NAMESPACE).lines():
            console.print(line, markup=False, highlight=False)
    console.print(f"map:     gputopo ui --kubeconfig {box.kubeconfig}  ->  http://127.0.0.1:8642/")


def demo(
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Simulated GPU nodes.")] = NODES,
    name: Annotated[str, typer.Option("--name", help="Sandbox name.")] = DEFAULT_NAME,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each step.")] = 120.0,
    fault: Annotated[bool, typer.Option("--fault/--no-fault", help="A link failure under a running job.")] = True,
    preempt: Annotated[
        bool, typer.Option("--preempt/--no-preempt", help="An urgent job that preempts a research job.")
    ] = True,
    order: Annotated[
        Order, typer.Option("--order", help="In which order the examples are applied (by name, reversed, shuffled).")
    ] = Order.NAME,
) -> None:
    """Run the whole story on a local sandbox."""
    box = Sandbox(name)
    try:
        status = box.up(nodes=nodes, profile="mixed", operator=True)
        console.print(f"[bold]sandbox up[/] at {status.server}: {len(status.nodes)} simulated GPU nodes")
        console.print(box.kubectl("get", "nodes", "-L", "gputopo.io/interconnect,gputopo.io/gpu.count,"
                                  "fabric.topograph.run/tier-0"))  # fmt: skip
        box.kubectl("create", "namespace", NAMESPACE, check=False)
        # The demo's gangs gputopo does not own (an Indexed Job, a PodGroup) are gated: gating is opt-in.
        enable_gating(box.kubectl, NAMESPACE)
        # A demo run again on the same sandbox starts from an empty namespace, not from the last run's jobs.
        box.kubectl("delete", "trainingjobs,jobs,pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=90s")
        examples = _examples_dir()
        gangs = _apply_examples(box, examples, order)
        # A gang's pods that kwok runs to completion let their GPUs go, and a job waiting for them is placed then.
        _wait_gangs(box, gangs, timeout)
        _wait_settled(box, timeout)
        console.print(job_table(_jobs(box)))
        if gangs:
            console.print(gang_table(_gangs(box)))
        if fault:
            _fail_a_link(box, timeout)
            console.print(job_table(_jobs(box)))
        if preempt:
            _preempt(box, examples / "preemption" / "urgent-eval.yaml", timeout)
            console.print(job_table(_jobs(box)))
        _explain_pending(box)
        console.print(f"\nexplore: export KUBECONFIG={box.kubeconfig}; kubectl get tj,gangs -n {NAMESPACE}")
        console.print("stop:    gputopo sandbox down" + (f" --name {name}" if name != DEFAULT_NAME else ""))
    except SandboxError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add `gputopo demo` to the app."""
    app.command("demo")(demo)
