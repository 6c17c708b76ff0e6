"""A node's rails to the network, as NCCL picks them, and what they carry: the inter-node part of the estimate.

Each node's inter-node bandwidth is what its chosen GPUs can push through their rails, as NCCL picks them
(``gputopo.topology.nccl`` for the paths and GPUDirect RDMA per NCCL version):

* A GPU's rails are the Up compute NICs at its nearest NCCL path type (``ncclTopoGetLocal``), all of them:
  NCCL spreads its channels over every NIC at the same distance. Storage and front-end NICs are never rails;
  a NIC whose role nobody stated counts as one. On a Grace GPU (NVLink-C2C) the NICs of its own Grace are
  P2C, nearer than any other.
* A rail carries ``rate/8 * NET_EFFICIENCY`` with GPUDirect RDMA; without (beyond NCCL's GDR level, or
  through C2C before NCCL 2.27.3) the bytes bounce through host memory at ``NIC_DISTANCE_SHARE`` of it. A GPU
  with no GDR rail may use an NVLink peer's (PXN; over C2C from NCCL 2.28).
* A path carries no more than its slowest link: each GPU pushes at most its PCIe x16 link (or its C2C to
  Grace: ``Gpu.c2c_gbps`` from NVML, else the model's figure), each NIC at most its rate once however many
  GPUs share it. The node's figure is the maximum flow through that network, which is the ring figure (each
  NIC carries ring channels); the gang's inter-node part is the weakest node's, divided by the network tier's
  oversubscription.

A node with no Up rail falls back to host networking at its slowest NIC's rate (or ``UNKNOWN_NIC_RATE_GBPS``)
through host memory. The ``gpudirect_rdma`` system fact is not read: nvidia-smi text cannot tell it, and an
imported topology would otherwise be penalised for a fact it does not carry; NCCL's own rule is used instead.

The constants (``NET_EFFICIENCY``, ``NIC_DISTANCE_SHARE``, ``UNKNOWN_NIC_RATE_GBPS``) are the estimator's, in
``gputopo.topology.estimate`` with the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.bandwidth import c2c_gbps, pcie_x16_gbps
from gputopo.topology.estimate import (
    NET_EFFICIENCY,
    NIC_DISTANCE_SHARE,
    UNKNOWN_NIC_RATE_GBPS,
    BusBandwidth,
    TopologyTables,
    gpu_mask,
    topology_tables,
)
from gputopo.topology.model import Nic, Topology
from gputopo.topology.nccl import DEFAULT_NCCL, NcclSettings, NicPath

__all__ = ["inter_node_bandwidth", "inter_node_part", "nic_assignment", "nic_paths"]


def _nic_rate(nic: Nic, override: float | None) -> float:
    if override is not None:
        return override
    return nic.rate_gbps or UNKNOWN_NIC_RATE_GBPS


def _nic_gbps(nic: Nic, override: float | None) -> float:
    """What NCCL gets through one NIC, GB/s: its rate / 8 at ``NET_EFFICIENCY``."""
    return _nic_rate(nic, override) / 8 * NET_EFFICIENCY


def _attachment_gbps(tables: TopologyTables, g: int) -> float:
    """What a GPU can push to its NICs: its NVLink-C2C to Grace, else its PCIe x16 link."""
    c2c = c2c_gbps(tables.topology.gpus[g])
    return c2c if c2c else NET_EFFICIENCY * pcie_x16_gbps(tables.pcie[g])


def _candidates(
    tables: TopologyTables, gpus: Sequence[int], nic_rate_gbps: float | None, settings: NcclSettings
) -> list[list[tuple[int, float]]]:
    """Per GPU, the NICs it may drive and what each carries for it (GB/s).

    Its own rails at the nearest path type: the line rate with GPUDirect RDMA, a share of it through host
    memory without. A GPU with no GDR rail of its own may also use, through an NVLink peer in the set (PXN),
    the peer's GDR rails at PXB or nearer (P2C too with ``NCCL_PXN_C2C``).
    """
    topology = tables.topology
    nics = topology.nics
    paths = tables.paths(settings)
    out: list[list[tuple[int, float]]] = []
    for g in gpus:
        own = tables.nearest(g)
        cands: dict[int, float] = {}
        for j in own:
            share = 1.0 if paths[g][j].gdr else NIC_DISTANCE_SHARE[paths[g][j].distance]
            cands[j] = _nic_gbps(nics[j], nic_rate_gbps) * share
        if not any(paths[g][j].gdr for j in own):
            for p in gpus:
                if p == g or not topology.nvlinks(g, p):
                    continue
                for j in tables.nearest(p):
                    path = paths[p][j]
                    if path.gdr and path.path.rank <= settings.pxn_level.rank:
                        cands[j] = _nic_gbps(nics[j], nic_rate_gbps)
        out.append(sorted(cands.items()))
    return out


def _max_flow(gpu_caps: list[float], nic_caps: list[float], edges: list[list[tuple[int, float]]]) -> list[list[float]]:
    """Max flow from the GPUs (each up to its cap) over their edges to the NICs (each up to its cap).

    Returns the flow on each GPU's edges, in the order given. Augmenting paths, shortest first; the graphs
    are a node's GPUs and NICs (a few dozen vertices).
    """
    k, m = len(gpu_caps), len(nic_caps)
    source, sink = k + m, k + m + 1
    size = k + m + 2
    cap = [[0.0] * size for _ in range(size)]
    for g in range(k):
        cap[source][g] = gpu_caps[g]
        for j, c in edges[g]:
            cap[g][k + j] += c
    for j in range(m):
        cap[k + j][sink] = nic_caps[j]
    flow = [[0.0] * size for _ in range(size)]
    while True:
        parent = [-1] * size
        parent[source] = source
        queue = [source]
        for u in queue:
            for v in range(size):
                if parent[v] < 0 and cap[u][v] - flow[u][v] > 1e-9:
                    parent[v] = u
                    queue.append(v)
        if parent[sink] < 0:
            break
        push, v = float("inf"), sink
        while v != source:
            u = parent[v]
            push = min(push, cap[u][v] - flow[u][v])
            v = u
        v = sink
        while v != source:
            u = parent[v]
            flow[u][v] += push
            flow[v][u] -= push
            v = u
    return [[max(flow[g][k + j], 0.0) for j, _ in edges[g]] for g in range(k)]


def nic_assignment(
    topology: Topology,
    gpus: Sequence[int],
    nic_rate_gbps: float | None = None,
    settings: NcclSettings = DEFAULT_NCCL,
) -> tuple[float, dict[int, tuple[int, ...]]]:
    """The GB/s the GPUs push off the node through their rails, and which NICs each GPU drives.

    A maximum flow: each GPU up to its attachment (PCIe x16, or NVLink-C2C on Grace), over every rail at
    its nearest path type (NCCL spreads channels over all of them; see ``_candidates``), each NIC up to its
    line rate once however many GPUs share it.
    """
    tables = topology_tables(topology)
    order = list(gpus)
    edges = _candidates(tables, order, nic_rate_gbps, settings)
    gpu_caps = [_attachment_gbps(tables, g) for g in order]
    # A NIC carries its line rate when one of its GPUs has GPUDirect RDMA to it, else what the best of the
    # host-memory paths to it allows.
    share = [0.0] * len(topology.nics)
    for cands in edges:
        for j, gbps in cands:
            share[j] = max(share[j], gbps / _nic_gbps(topology.nics[j], nic_rate_gbps))
    nic_caps = [_nic_gbps(nic, nic_rate_gbps) * share[j] for j, nic in enumerate(topology.nics)]
    flows = _max_flow(gpu_caps, nic_caps, edges)
    total = sum(sum(row) for row in flows)
    picks = {
        g: tuple(j for (j, _), f in zip(cands, row, strict=True) if f > 1e-9)
        for g, cands, row in zip(order, edges, flows, strict=True)
    }
    return total, {g: used for g, used in picks.items() if used}


def _host_network(topology: Topology, gpus: Sequence[int], nic_rate_gbps: float | None) -> float:
    rates = [_nic_rate(n, nic_rate_gbps) for n in topology.nics]
    rate = min(rates) if rates else (nic_rate_gbps or UNKNOWN_NIC_RATE_GBPS)
    tables = topology_tables(topology)
    cap = min(NET_EFFICIENCY * pcie_x16_gbps(tables.pcie[g]) for g in gpus)
    return min(rate / 8 * NET_EFFICIENCY * NIC_DISTANCE_SHARE[LinkKind.SYS], cap)


def inter_node_part(
    topology: Topology,
    gpus: Sequence[int],
    nic_rate_gbps: float | None,
    settings: NcclSettings = DEFAULT_NCCL,
) -> tuple[float, str]:
    total, picks = nic_assignment(topology, gpus, nic_rate_gbps, settings)
    if not picks:
        value = _host_network(topology, gpus, nic_rate_gbps)
        return value, f"no Up RDMA NIC: host network ({value:.1f} GB/s)"
    used = sorted({j for js in picks.values() for j in js})
    rates = sorted({_nic_rate(topology.nics[j], nic_rate_gbps) for j in used})
    rate_text = "/".join(f"{r:g}" for r in rates)
    names = ",".join(topology.nics[j].name for j in used)
    guessed = nic_rate_gbps is None and any(not topology.nics[j].rate_gbps for j in used)
    note = f", rate unknown: {UNKNOWN_NIC_RATE_GBPS:g} Gb/s assumed" if guessed else ""
    tables = topology_tables(topology)
    edges = dict(zip(gpus, _candidates(tables, gpus, nic_rate_gbps, settings), strict=True))
    full = {g: {j: gbps for j, gbps in cands} for g, cands in edges.items()}
    bounced = any(full[g][j] < _nic_gbps(topology.nics[j], nic_rate_gbps) - 1e-9 for g, js in picks.items() for j in js)
    how = ", some through host memory (no GPUDirect RDMA)" if bounced else ""
    return total, f"{len(used)} NIC(s) x {rate_text} Gb/s ({names}{note}{how}): {total:.1f} GB/s"


def inter_node_bandwidth(
    topology: Topology,
    gpus: Sequence[int],
    nic_rate_gbps: float | None = None,
    settings: NcclSettings = DEFAULT_NCCL,
) -> BusBandwidth:
    """What one node's GPU set pushes off the node (GB/s) in a multi-node gang, before oversubscription.

    The per-node inter-node part of ``estimate_gang``: its gang figure is the minimum over members of
    ``estimate_node`` and this value divided by the tier's oversubscription.
    """
    gpu_mask(topology, gpus)
    value, what = inter_node_part(topology, list(gpus), nic_rate_gbps, settings)
    return BusBandwidth(value, what)


def nic_paths(topology: Topology, gpu: int, settings: NcclSettings = DEFAULT_NCCL) -> tuple[NicPath, ...]:
    """How a GPU reaches each of the node's NICs under these NCCL settings (path type, GDR), in NIC order."""
    gpu_mask(topology, [gpu])
    return topology_tables(topology).paths(settings)[gpu]
