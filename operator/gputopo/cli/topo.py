"""`gputopo topo import|show` and `gputopo estimate`.

A topology FILE is ``nvidia-smi topo -m`` output or NodeTopology YAML (a whole object or its status);
``-`` reads standard input, and the name of a catalog node type (``hgx-h100``, …) stands for its fixture.
Every ``--json`` output is one JSON document on stdout; errors go to stderr with exit code 2.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gputopo.api.group import API_VERSION
from gputopo.api.nodetopology import LinkState, NodeTopology, ProbeInfo
from gputopo.cli.errors import CliError, fail, read_text
from gputopo.topology import (
    NODE_TYPES,
    Topology,
    TopologyError,
    estimate_gang,
    estimate_node,
    from_status,
    gpu_spec,
    interconnect_class,
    load_node_type,
    nearest_gpus,
    nvlink_domain_size,
    nvlink_domains,
    nvlink_generation,
    read_topology_text,
    render_nvidia_smi,
    to_status,
    with_gpu_model,
)
from gputopo.topology.fabric import node_domain
from gputopo.topology.gang import split_evenly
from gputopo.topology.nccl import DEFAULT_NCCL_VERSION, NcclSettings, NcclVersion
from gputopo.topology.nvidia_smi import cell_text

__all__ = ["register"]

topo_app = typer.Typer(
    help="Import and show GPU node topologies (nvidia-smi topo -m, NodeTopology YAML).", no_args_is_help=True
)

GpuModelOpt = Annotated[
    str | None,
    typer.Option("--gpu-model", help="GPU product name, e.g. 'NVIDIA H100 80GB HBM3' (sets the NVLink bandwidth)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
C2cOpt = Annotated[
    bool | None,
    typer.Option(
        "--c2c/--no-c2c",
        help="The GPUs reach a Grace CPU over NVLink-C2C (GH200, GB200, GB300); inferred from the GPU model or the "
        "matrix's GPU NUMA IDs when not given.",
    ),
]


def _read_text(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    return read_text(Path(source), missing=f"no such file (nor a node type: {', '.join(NODE_TYPES)})")


def _load(source: str, gpu_model: str | None, fmt: str = "auto", c2c: bool | None = None) -> Topology:
    """The topology in FILE (or stdin, or a catalog node type)."""
    if source in NODE_TYPES and not Path(source).exists():
        topology = load_node_type(source)
        return with_gpu_model(topology, gpu_model) if gpu_model else topology
    text = _read_text(source)
    try:
        return read_topology_text(text, gpu_model=gpu_model, fmt=fmt, c2c=c2c)
    except TopologyError as error:
        raise CliError(f"{source}: {error}") from None


def _read_cluster(name: str) -> NodeTopology:
    """The NodeTopology named after a node, read from the cluster in $KUBECONFIG with ``gputopo.kube``'s client."""
    from gputopo.kube.client import KubeClient, load_configuration
    from gputopo.kube.errors import ApiError, KubeconfigError, NotFoundError

    async def read() -> dict[str, Any]:
        client = KubeClient(load_configuration(), concurrency=1)
        try:
            return await client.get_node_topology(name)
        finally:
            await client.close()

    try:
        obj = asyncio.run(read())
    except KubeconfigError as error:
        raise CliError(f"cannot load a kubeconfig (set $KUBECONFIG): {error}") from None
    except NotFoundError:
        raise CliError(f"no NodeTopology {name!r} in the cluster") from None
    except ApiError as error:
        if error.status == 0:
            raise CliError(f"cannot reach the API server: {error}") from None
        raise CliError(f"reading NodeTopology {name!r}: {error.status} {error.reason}") from None
    return NodeTopology.model_validate(obj)


def _parse_gpus(text: str, topology: Topology) -> list[int]:
    """``0,1,2,3``, ``0-3,6`` or ``all``."""
    if text.strip().lower() == "all":
        return list(range(topology.gpu_count))
    gpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise CliError(f"--gpus: {part!r} is not a GPU index or range (use e.g. 0,1,2,3 or 0-3)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise CliError(f"--gpus: range {part!r} runs backwards")
        gpus.extend(range(low, high + 1))
    for g in gpus:
        if g >= topology.gpu_count:
            raise CliError(f"--gpus: no GPU{g}; the topology has GPUs 0..{topology.gpu_count - 1}")
    if len(set(gpus)) != len(gpus):
        raise CliError("--gpus: a GPU is listed twice")
    return gpus


# -- topo import ----------------------------------------------------------------------------------------------


@topo_app.command("import")
def import_(
    file: Annotated[str, typer.Argument(help="nvidia-smi topo -m output (or NodeTopology YAML); - for stdin.")],
    gpu_model: GpuModelOpt = None,
    node_name: Annotated[str | None, typer.Option("--node-name", help="metadata.name of the NodeTopology.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the YAML here, not to stdout.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, nvidia-smi or yaml.")] = "auto",
) -> None:
    """Turn `nvidia-smi topo -m` text into a NodeTopology YAML document."""
    try:
        topology = _load(file, gpu_model, fmt)
    except CliError as error:
        fail(str(error))
    name = node_name or (Path(file).stem if file != "-" else "node")
    status = to_status(topology, probe=ProbeInfo(backend="nvidia-smi"))
    document = {
        "apiVersion": API_VERSION,
        "kind": NodeTopology.kind,
        "metadata": {"name": name},
        "status": status.to_api(),
    }
    text = yaml.safe_dump(document, sort_keys=False)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        fail(f"{output}: {error.strerror or error}")


# -- topo show ------------------------------------------------------------------------------------------------


def _summary(topology: Topology) -> dict[str, Any]:
    n = topology.gpu_count
    nics = []
    for nic in topology.nics:
        near = nearest_gpus(topology, nic)
        nics.append(
            {
                "name": nic.name,
                "link_layer": nic.link_layer,
                "state": str(nic.state),
                "rate_gbps": nic.rate_gbps,
                "numa_node": nic.numa_node,
                "nearest_gpus": list(near),
                "nearest_kind": str(nic.distance(near[0])) if near else None,
                "affinity": [str(nic.distance(g)) for g in range(n)],
            }
        )
    not_up = [
        {"a": link.a, "b": link.b, "kind": str(link.kind), "nvlinks": link.nvlinks, "state": str(link.state)}
        for _, link in sorted(topology.links.items())
        if link.state is not LinkState.UP
    ]
    everything = estimate_node(topology, range(n)) if n else None
    spec = gpu_spec(topology.gpu_model)
    fabric = node_domain(topology) if any(g.fabric for g in topology.gpus) else None
    return {
        "gpu_count": n,
        "nic_count": len(topology.nics),
        "gpu_model": topology.gpu_model or None,
        "architecture": spec.architecture if spec else None,
        "nvlink": nvlink_generation(topology.gpus[0]).name if n and nvlink_domains(topology) else None,
        "kinds": [[cell_text(topology, a, b) for b in range(n)] for a in range(n)],
        "nvlinks": [list(row) for row in topology.nvlink_matrix],
        "interconnect": interconnect_class(topology),
        "nvlink_domain_size": nvlink_domain_size(topology),
        "nvlink_domains": [list(d) for d in nvlink_domains(topology)],
        "multi_node_nvlink": (
            {"clique": fabric.clique or None, "health": str(fabric.health), "reason": fabric.reason or None}
            if fabric
            else None
        ),
        "nics": nics,
        "links_not_up": not_up,
        "unhealthy_gpus": [g.index for g in topology.gpus if not g.healthy],
        "system": {
            "driver_version": topology.system.driver_version or None,
            "cuda_driver_version": topology.system.cuda_driver_version or None,
            "nvswitch": topology.system.nvswitch,
            "gpudirect_rdma": topology.system.gpudirect_rdma,
        },
        "busbw_GBps": round(everything.busbw_gbps, 3) if everything else None,
        "bottleneck": everything.bottleneck if everything else None,
        "assumptions": list(topology.system.assumptions),
    }


def _ranges(gpus: list[int]) -> str:
    if not gpus:
        return "-"
    parts = []
    start = prev = gpus[0]
    for g in [*gpus[1:], None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        parts.append(f"GPU{start}" if start == prev else f"GPU{start}-{prev}")
        if g is not None:
            start = prev = g
    return ",".join(parts)


def _print_summary(topology: Topology, summary: dict[str, Any]) -> None:
    typer.echo(render_nvidia_smi(topology), nl=False)
    typer.echo("")
    typer.echo("Summary:")
    model = summary["gpu_model"] or "unknown (pass --gpu-model to set the NVLink bandwidth)"
    extra = ", ".join(x for x in (summary["architecture"], summary["nvlink"]) if x)
    typer.echo(f"  GPUs: {summary['gpu_count']} x {model}" + (f" ({extra})" if extra else ""))
    typer.echo(f"  Interconnect: {summary['interconnect']}; NVLink domain size {summary['nvlink_domain_size']}")
    domains = summary["nvlink_domains"]
    typer.echo("  NVLink domains: " + ("; ".join(_ranges(d) for d in domains) if domains else "none"))
    mnnvl = summary["multi_node_nvlink"]
    if mnnvl is not None:
        why = f": {mnnvl['reason']}" if mnnvl["reason"] else ""
        typer.echo(f"  Multi-node NVLink domain: {mnnvl['clique'] or 'none'} ({mnnvl['health']}{why})")
    if summary["busbw_GBps"] is not None:
        typer.echo(
            f"  Estimated all-reduce bus bandwidth, all GPUs: {summary['busbw_GBps']:.1f} GB/s "
            f"({summary['bottleneck']})"
        )
    if summary["nics"]:
        typer.echo("  NICs:")
        for nic in summary["nics"]:
            rate = f"{nic['rate_gbps']:g} Gb/s" if nic["rate_gbps"] else "rate unknown"
            numa = f"NUMA {nic['numa_node']}" if nic["numa_node"] is not None else "NUMA ?"
            typer.echo(
                f"    {nic['name']:<10} {nic['link_layer']:<10} {nic['state']:<4} {rate:<13} {numa:<7} "
                f"nearest {_ranges(nic['nearest_gpus'])} ({nic['nearest_kind']})"
            )
    else:
        typer.echo("  NICs: none listed")
    if summary["links_not_up"]:
        typer.echo("  Links not Up:")
        for link in summary["links_not_up"]:
            typer.echo(f"    GPU{link['a']}-GPU{link['b']} {link['kind']} x{link['nvlinks']} {link['state']}")
    if summary["unhealthy_gpus"]:
        typer.echo("  Unhealthy GPUs: " + ", ".join(f"GPU{g}" for g in summary["unhealthy_gpus"]))
    if summary["assumptions"]:
        typer.echo("  Assumed:")
        for assumption in summary["assumptions"]:
            typer.echo(f"    {assumption}")


@topo_app.command("show")
def show(
    file: Annotated[
        str | None, typer.Argument(help="nvidia-smi text or NodeTopology YAML; - for stdin; or a node type.")
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="Read NodeTopology NAME from the cluster.")] = None,
    gpu_model: GpuModelOpt = None,
    c2c: C2cOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the matrix the way nvidia-smi does, and a summary (interconnect, NVLink domains, NICs)."""
    try:
        if (file is None) == (node is None):
            raise CliError("give a FILE or --node NAME (one of them)")
        if node is not None:
            topology = from_status(_read_cluster(node).status)
            if gpu_model:
                topology = with_gpu_model(topology, gpu_model)
        else:
            assert file is not None
            topology = _load(file, gpu_model, c2c=c2c)
        summary = _summary(topology)
    except (CliError, TopologyError) as error:
        fail(str(error))
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        _print_summary(topology, summary)


# -- estimate -------------------------------------------------------------------------------------------------


def estimate(
    topology_file: Annotated[
        str, typer.Option("--topology", help="nvidia-smi text or NodeTopology YAML (or a node type name).")
    ],
    gpus: Annotated[str, typer.Option("--gpus", help="GPU indices: 0,1,2,3 or 0-3 or all.")] = "all",
    gpu_model: GpuModelOpt = None,
    nodes: Annotated[int, typer.Option("--nodes", help="N identical nodes, each using these GPUs.")] = 1,
    nodes_per_domain: Annotated[
        int | None,
        typer.Option(
            "--nodes-per-domain",
            help="Nodes per multi-node NVLink domain (18 for an NVL72 rack of GB200 trays): the N nodes are "
            "spread evenly over ceil(N/D) domains.",
        ),
    ] = None,
    nic_rate_gbps: Annotated[
        float | None, typer.Option("--nic-rate-gbps", help="Every NIC's rate, Gb/s (nvidia-smi does not say).")
    ] = None,
    oversubscription: Annotated[
        float, typer.Option("--oversubscription", help="Network tier oversubscription between the nodes.")
    ] = 1.0,
    nccl_version: Annotated[
        str,
        typer.Option(
            "--nccl-version", help="The NCCL the job runs (decides GPUDirect RDMA through NVLink-C2C on Grace)."
        ),
    ] = str(DEFAULT_NCCL_VERSION),
    c2c: C2cOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Estimate the all-reduce bus bandwidth (nccl-tests busbw, GB/s) of a GPU set on N nodes."""
    try:
        if nodes < 1:
            raise CliError(f"--nodes must be at least 1, not {nodes}")
        if nic_rate_gbps is not None and nic_rate_gbps <= 0:
            raise CliError(f"--nic-rate-gbps must be positive, not {nic_rate_gbps:g}")
        if oversubscription <= 0:
            raise CliError(f"--oversubscription must be positive, not {oversubscription:g}")
        settings = NcclSettings(NcclVersion.parse(nccl_version))
        topology = _load(topology_file, gpu_model, c2c=c2c)
        if topology.gpu_count == 0:
            raise CliError(f"{topology_file}: the topology has no GPUs to estimate")
        chosen = _parse_gpus(gpus, topology)
        if not chosen:
            raise CliError("--gpus names no GPU")
        domains: list[str] | None = None
        if nodes_per_domain is not None:
            if nodes_per_domain < 1:
                raise CliError(f"--nodes-per-domain must be at least 1, not {nodes_per_domain}")
            sizes = split_evenly(nodes, -(-nodes // nodes_per_domain))
            domains = [f"domain-{d}" for d, size in enumerate(sizes) for _ in range(size)]
        if nodes == 1:
            result = estimate_node(topology, chosen)
        else:
            result = estimate_gang(
                [(topology, chosen)] * nodes,
                oversubscription=oversubscription,
                nic_rate_gbps=nic_rate_gbps,
                domains=domains,
                settings=settings,
            )
    except (CliError, TopologyError) as error:
        fail(str(error))
    if as_json:
        document: dict[str, Any] = {"busbw_GBps": round(result.busbw_gbps, 3), "bottleneck": result.bottleneck}
        if domains is not None:
            document["domains"] = [domains.count(d) for d in dict.fromkeys(domains)]
        if topology.system.assumptions:
            document["assumptions"] = list(topology.system.assumptions)
        typer.echo(json.dumps(document))
        return
    where = f"{len(chosen)} GPU(s)" + (f" on each of {nodes} nodes" if nodes > 1 else "")
    if domains is not None:
        where += f" in {len(set(domains))} NVLink domain(s)"
    typer.echo(f"estimated all-reduce bus bandwidth of {where}: {result.busbw_gbps:.1f} GB/s")
    typer.echo(f"bottleneck: {result.bottleneck}")
    for assumption in topology.system.assumptions:
        typer.echo(f"assumed: {assumption}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gputopo` app."""
    app.add_typer(topo_app, name="topo")
    app.command("estimate")(estimate)
