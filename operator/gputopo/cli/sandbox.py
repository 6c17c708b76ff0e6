"""`gputopo sandbox up|down|status|fault`: the local control plane with simulated GPU nodes."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gputopo.cli.errors import fail
from gputopo.control.dra import GpuAllocation
from gputopo.sandbox import DEFAULT_NAME, PROFILES, Sandbox, SandboxError
from gputopo.sandbox.faults import fabric_fault, gpu_fault, link_fault, nic_fault, node_fault

__all__ = ["register"]

sandbox_app = typer.Typer(help="A real local control plane with simulated GPU nodes.", no_args_is_help=True)
fault_app = typer.Typer(help="Inject faults below the probe (fake NVML, sysfs, kwok).", no_args_is_help=True)
sandbox_app.add_typer(fault_app, name="fault")

NameOpt = Annotated[str, typer.Option("--name", help="Sandbox name.")]
NodeOpt = Annotated[str, typer.Option("--node", help="Simulated node name.")]


def _fail(error: SandboxError) -> None:
    fail(str(error))


@sandbox_app.command("up")
def up(
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=10000, help="Simulated GPU nodes.")] = 8,
    profile: Annotated[str, typer.Option("--profile", help=f"Node mix: {', '.join(sorted(PROFILES))}.")] = "mixed",
    operator: Annotated[
        bool,
        typer.Option(
            "--operator/--no-operator",
            help="Also run the operator, with the chart's admission policy that gates the pods of other gangs.",
        ),
    ] = False,
    probes: Annotated[bool, typer.Option("--probes/--no-probes", help="Run the fake node probes.")] = True,
    interval: Annotated[float, typer.Option("--probe-interval", help="Probe poll interval, s.")] = 1.0,
    gpu_allocation: Annotated[
        GpuAllocation,
        typer.Option(
            "--gpu-allocation",
            help="devicePlugin, or dra: the fake probes publish ResourceSlices as NVIDIA's DRA driver does and "
            "the operator creates a ResourceClaim per rank.",
        ),
    ] = GpuAllocation.DEVICE_PLUGIN,
    fake_allocation: Annotated[
        str,
        typer.Option(
            "--fake-allocation",
            help="Which GPUs the fake probes report a pod holding: plan (the operator's, when free) or "
            "device-plugin (NVIDIA's device plugin's own choice, ignoring the plan as a real kubelet does).",
        ),
    ] = "plan",
    kueue: Annotated[
        bool,
        typer.Option(
            "--kueue/--no-kueue",
            help="Also run Kueue's manager (built by hack/build-kueue.sh) with queues for the sandbox's GPUs.",
        ),
    ] = False,
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Start the sandbox (or reuse a running one with the same shape)."""
    try:
        status = Sandbox(name).up(
            nodes=nodes,
            profile=profile,
            operator=operator,
            probes=probes,
            probe_interval=interval,
            gpu_allocation=gpu_allocation.value,
            fake_allocation=fake_allocation,
            kueue=kueue,
        )
    except SandboxError as error:
        _fail(error)
        return
    typer.echo(f"sandbox {status.name!r} is up at {status.server} with {len(status.nodes)} GPU nodes")
    typer.echo(f"  export KUBECONFIG={status.kubeconfig}")


@sandbox_app.command("status")
def status(
    name: NameOpt = DEFAULT_NAME,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Say whether the sandbox runs, where, and with what."""
    try:
        st = Sandbox(name).status()
    except SandboxError as error:
        _fail(error)
        return
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "name": st.name,
                    "running": st.running,
                    "server": st.server,
                    "kubeconfig": str(st.kubeconfig),
                    "profile": st.profile,
                    "nodes": st.nodes,
                    "probes": st.probes,
                    "operator": st.operator,
                    "kueue": st.kueue,
                }
            )
        )
        return
    if not st.running:
        typer.echo(f"sandbox {st.name!r} is not running (start it with `gputopo sandbox up`)")
        raise typer.Exit(1)
    typer.echo(f"sandbox {st.name!r}: running at {st.server}")
    typer.echo(f"  kubeconfig: {st.kubeconfig}")
    typer.echo(f"  nodes:      {len(st.nodes)} ({st.profile})")
    typer.echo(f"  probes:     {'running' if st.probes else 'stopped'}")
    typer.echo(f"  operator:   {'running' if st.operator else 'stopped'}")
    typer.echo(f"  kueue:      {'running' if st.kueue else 'stopped'}")


@sandbox_app.command("down")
def down(name: NameOpt = DEFAULT_NAME) -> None:
    """Stop the operator, probes and Kueue and delete the cluster."""
    try:
        Sandbox(name).down()
    except SandboxError as error:
        _fail(error)
    typer.echo(f"sandbox {name!r} is down")


def _gpus(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        fail("--gpus takes two GPU indices, e.g. --gpus 0,1")
    return a, b


@fault_app.command("link")
def fault_link(
    node: NodeOpt,
    gpus: Annotated[str, typer.Option("--gpus", help="The two GPUs of the link, e.g. 0,1.")],
    state: Annotated[str, typer.Option("--state", help="down, degraded or up.")],
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Take an NVLink down, degrade it, or bring it back."""
    if state not in ("down", "degraded", "up"):
        fail("--state must be down, degraded or up")
    a, b = _gpus(gpus)
    try:
        link_fault(Sandbox(name), node, a, b, state)  # type: ignore[arg-type]
    except SandboxError as error:
        _fail(error)
    typer.echo(f"{node}: link GPU{a}-GPU{b} {state}")


@fault_app.command("fabric")
def fault_fabric(
    node: NodeOpt,
    state: Annotated[str, typer.Option("--state", help="degraded (e.g. a switch tray lost), down or up.")],
    whole_domain: Annotated[
        bool, typer.Option("--whole-domain", help="Every node of the node's NVLink domain (its NVL72 rack).")
    ] = False,
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Degrade a node's multi-node NVLink fabric, take it down, or heal it (every GPU of the node)."""
    if state not in ("down", "degraded", "up"):
        fail("--state must be down, degraded or up")
    try:
        changed = fabric_fault(Sandbox(name), node, state, whole_domain=whole_domain)  # type: ignore[arg-type]
    except SandboxError as error:
        _fail(error)
        return
    typer.echo(f"{', '.join(changed)}: NVLink fabric {state}")


@fault_app.command("nic")
def fault_nic(
    node: NodeOpt,
    nic: Annotated[str, typer.Option("--nic", help="NIC name, e.g. mlx5_0.")],
    state: Annotated[str, typer.Option("--state", help="down or up.")],
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Take a NIC port down or bring it back."""
    if state not in ("down", "up"):
        fail("--state must be down or up")
    try:
        nic_fault(Sandbox(name), node, nic, state)  # type: ignore[arg-type]
    except SandboxError as error:
        _fail(error)
    typer.echo(f"{node}: NIC {nic} {state}")


@fault_app.command("gpu")
def fault_gpu(
    node: NodeOpt,
    gpu: Annotated[int, typer.Option("--gpu", min=0, help="GPU index.")],
    xid: Annotated[int | None, typer.Option("--xid", help="Raise this XID (e.g. 79: fallen off the bus).")] = None,
    hot: Annotated[bool, typer.Option("--hot", help="Thermal slowdown.")] = False,
    clear: Annotated[bool, typer.Option("--clear", help="Clear the GPU's faults.")] = False,
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Raise an XID on a GPU, make it hot, or clear it."""
    try:
        gpu_fault(Sandbox(name), node, gpu, xid=xid, hot=hot, clear=clear)
    except SandboxError as error:
        _fail(error)
    what = f"XID {xid}" if xid is not None else ("hot" if hot else "cleared")
    typer.echo(f"{node}: GPU{gpu} {what}")


@fault_app.command("node")
def fault_node(
    node: NodeOpt,
    not_ready: Annotated[bool, typer.Option("--not-ready", help="The kubelet stops posting status.")] = False,
    ready: Annotated[bool, typer.Option("--ready", help="The kubelet is back.")] = False,
    delete: Annotated[bool, typer.Option("--delete", help="Delete the Node.")] = False,
    name: NameOpt = DEFAULT_NAME,
) -> None:
    """Make a node NotReady, Ready again, or delete it."""
    chosen = [a for a, on in (("not-ready", not_ready), ("ready", ready), ("delete", delete)) if on]
    if len(chosen) != 1:
        fail("give exactly one of --not-ready, --ready or --delete")
    try:
        node_fault(Sandbox(name), node, chosen[0])  # type: ignore[arg-type]
    except SandboxError as error:
        _fail(error)
    typer.echo(f"{node}: {chosen[0]}")


def register(app: typer.Typer) -> None:
    """Add `gputopo sandbox` to the app."""
    app.add_typer(sandbox_app, name="sandbox")
