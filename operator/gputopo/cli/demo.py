"""`gputopo demo`: the sandbox with a mix of GPU node types, the operator, the example jobs — where each
landed and its estimated bus bandwidth — and then a link failure under a running job, re-placed live.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gputopo.sandbox import DEFAULT_NAME, Sandbox, SandboxError
from gputopo.sandbox.faults import link_fault

__all__ = ["register"]

NAMESPACE = "demo"
# Wide enough for the placement table even when the output is a pipe or a CI log.
console = Console(width=max(Console().width, 150))


def _examples_dir() -> Path:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "examples"
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise SandboxError("examples/ not found; run the demo from a gputopo source checkout")


def _jobs(box: Sandbox) -> list[dict[str, Any]]:
    items = json.loads(box.kubectl("get", "trainingjobs", "-n", NAMESPACE, "-o", "json"))["items"]
    return sorted(items, key=lambda j: j["metadata"]["name"])


def _placement_cells(job: dict[str, Any]) -> tuple[str, str, str, str]:
    placement = (job.get("status") or {}).get("placement") or {}
    workers = placement.get("workers") or []
    nodes = sorted({w["node"] for w in workers})
    gpus = "; ".join(f"r{w['rank']}:{','.join(map(str, w.get('gpus', [])))}" for w in workers[:4])
    if len(workers) > 4:
        gpus += f"; … {len(workers) - 4} more"
    busbw = placement.get("estimatedBusBandwidthGBps")
    return (
        ", ".join(nodes[:4]) + (" …" if len(nodes) > 4 else ""),
        gpus,
        f"{busbw:.1f}" if isinstance(busbw, int | float) else "-",
        placement.get("bottleneck", ""),
    )


def _table(box: Sandbox) -> Table:
    table = Table(title="TrainingJobs in the sandbox", header_style="bold")
    for column in ("job", "phase", "gang", "nodes", "GPUs (rank:indices)", "busbw GB/s", "bottleneck", "why"):
        table.add_column(column)
    for job in _jobs(box):
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


def _settled(job: dict[str, Any]) -> bool:
    """Running or finished, or waiting with the engine's reason written on it."""
    status = job.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    return any(c.get("status") == "False" and c.get("message") for c in status.get("conditions", []))


def _wait_settled(box: Sandbox, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = _jobs(box)
        if jobs and all(_settled(j) for j in jobs):
            return
        time.sleep(1)


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


def demo(
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Simulated GPU nodes.")] = 16,
    name: Annotated[str, typer.Option("--name", help="Sandbox name.")] = DEFAULT_NAME,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each step.")] = 120.0,
    fault: Annotated[bool, typer.Option("--fault/--no-fault", help="End with a link failure.")] = True,
) -> None:
    """Run the whole story on a local sandbox."""
    box = Sandbox(name)
    try:
        status = box.up(nodes=nodes, profile="mixed", operator=True)
        console.print(f"[bold]sandbox up[/] at {status.server}: {len(status.nodes)} simulated GPU nodes")
        console.print(box.kubectl("get", "nodes", "-L", "gputopo.io/interconnect,gputopo.io/gpu.count,"
                                  "fabric.topograph.run/tier-0"))  # fmt: skip
        box.kubectl("create", "namespace", NAMESPACE, check=False)
        examples = _examples_dir()
        for path in sorted(examples.glob("*.yaml")):
            box.kubectl("apply", "-n", NAMESPACE, "-f", str(path))
            console.print(f"applied {path.name}")
        _wait_settled(box, timeout)
        console.print(_table(box))
        if fault:
            _fail_a_link(box, timeout)
            console.print(_table(box))
        console.print(f"\nexplore: export KUBECONFIG={box.kubeconfig}; kubectl get tj -n {NAMESPACE}")
        console.print("stop:    gputopo sandbox down")
    except SandboxError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add `gputopo demo` to the app."""
    app.command("demo")(demo)
