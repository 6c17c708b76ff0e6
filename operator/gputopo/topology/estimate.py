"""The all-reduce bus bandwidth estimator: the model and every constant it uses, in this one place.

What it estimates: the bus bandwidth ("busbw", GB/s) that nccl-tests ``all_reduce_perf`` reports for large
messages on a set of GPUs: ``algbw * 2(n-1)/n``, which for a ring equals the bandwidth of its slowest hop.

One node (``estimate_node``), GPU set S of size k:

* k = 1: nothing crosses a link; the figure is the GPU's own attachment (its NVLink, else PCIe P2P) so
  that it never limits a gang.
* Otherwise the largest of up to three candidates:
  - One ring over the best hops: the ring must cross between any split of S, so its slowest hop is the
    bottleneck edge of the maximum spanning tree over per-pair hop bandwidths. An NVLink or NVSwitch hop
    carries ``NVLINK_RING_EFFICIENCY`` of links * per-link GB/s (on NVSwitch the pair's count is the
    GPU's total, so that is the GPU's whole NVLink bandwidth B). PCIe hops: NCCL's default uses GPU P2P
    only up to PXB (``p2pLevel = PATH_PXB`` in NCCL's paths.cc; AMD hosts with 2 GPUs excepted), so
    PIX/PXB hops get ``PCIE_P2P_SHARE`` of the x16 rate and PHB/NODE/SYS hops go through host memory
    (SHM) at ``SHM_SHARE`` of it. A Down link falls back to the SYS host-memory path.
  - NVLink rings: when S is connected by usable NVLink, the bandwidth rings can carry is bounded by the
    weakest cut of S, counting each pair's NVLinks (NCCL routes through a peer GPU, "NVB", where a pair
    has none): ``NVLINK_RING_EFFICIENCY * min-cut``; an NVSwitch pair counts ``B/(k-1)`` (its GPU's
    bandwidth is shared by k-1 peers). Exact on nodes of up to 12 GPUs without NVSwitch (a DGX-1 quad
    pair); elsewhere the weakest single GPU's cut stands for it. Which of the two is chosen by link
    kinds, never by link states.
  - NVLink SHARP (NVLS), when every pair is a usable NVSwitch link and the GPUs are NVLink4+ (Hopper,
    Blackwell): its algbw is a fixed share of B, so its busbw is ``NVLS_ALGBW_EFFICIENCY * B * 2(k-1)/k``,
    which beats the ring from 3 GPUs up.
  Each candidate only falls when a link goes down or loses links, so taking a link down never raises the
  estimate, and none depends on how the GPUs are numbered. Without a GPU model the NVLink generation is
  unknown and 25 GB/s per link (NVLink2-4) is assumed, without NVLS: pass the model.

Several nodes (``estimate_gang``, in ``gputopo.topology.gang``): the minimum of each node's intra-node figure
and the inter-node part.
Each node's inter-node bandwidth is what its chosen GPUs push through their rails, as NCCL picks them, at the
constants below (``gputopo.topology.rails``).

Calibration (``gputopo.topology.calibration`` maps each published row of
shared/fixtures/nccl-busbw-calibration.tsv to a placement; tests/unit/topology/test_calibration.py checks it):
NVLINK_RING_EFFICIENCY from the A100 NVSwitch ring (232.5 of 300 GB/s) and the maintainer's "~370 effective"
H100 ring; NVLS_ALGBW_EFFICIENCY from the H100 NVLS runs (470-480 busbw, algbw ~275 of 450), and its NVLink 5
figure from the B200 run of NVIDIA/nccl#1807 ("830+", algbw ~474 of 900: not twice Hopper's); NET_EFFICIENCY
from "expect 46-48 GB/s per NDR NIC"; SHM_SHARE from the P2P-disabled A40/DGX runs. PCIE_P2P_SHARE and
NIC_DISTANCE_SHARE are typical figures; the GH200 rows of NVIDIA/nccl#1579 check the NODE share (79.7 GB/s
without GPUDirect RDMA, 96.1 with, over 4x 200G). The test prints each row.

Known limits: NCCL's tree and NVLS-tree algorithms can beat the ring figure on two nodes (the GCP A3 Mega
row is 1.7 times its NIC line rate), VMs may lack NVLS, and PCIe host-memory paths vary a lot by platform.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology.bandwidth import c2c_gbps, nvlink_generation, pcie_generation, pcie_x16_gbps
from gputopo.topology.memo import Memo, SharedTable, Table
from gputopo.topology.model import PCIE_LEVELS, Topology, TopologyError
from gputopo.topology.nccl import DEFAULT_NCCL, NcclSettings, NicPath, nic_path

__all__ = [
    "NET_EFFICIENCY",
    "NIC_DISTANCE_SHARE",
    "NVLINK_RING_EFFICIENCY",
    "NVLS_ALGBW_EFFICIENCY",
    "NVLS_ALGBW_EFFICIENCY_NVLINK5",
    "PCIE_P2P_SHARE",
    "SHM_SHARE",
    "UNKNOWN_NIC_RATE_GBPS",
    "BusBandwidth",
    "TopologyTables",
    "clear_shared_tables",
    "estimate_node",
    "gpu_mask",
    "hop_gbps",
    "nvlink_fabric",
    "topology_tables",
]

# -- the constants -----------------------------------------------------------------------------------------

# Ring all-reduce busbw over NVLink / NVSwitch as a share of the per-direction NVLink bandwidth.
NVLINK_RING_EFFICIENCY = 0.78
# NVLink SHARP all-reduce algbw as a share of the per-direction NVLink bandwidth (H100: ~272 of 450 GB/s).
NVLS_ALGBW_EFFICIENCY = 0.605
# The same on NVLink 5 (B200: "830+" busbw on eight GPUs, NVIDIA/nccl#1807: algbw ~474 of 900 GB/s).
NVLS_ALGBW_EFFICIENCY_NVLINK5 = 0.527
# PCIe P2P ring hop (through PCIe switches only) as a share of the x16 rate per direction.
PCIE_P2P_SHARE: dict[LinkKind, float] = {LinkKind.PIX: 0.72, LinkKind.PXB: 0.68}
# Host-memory (SHM) ring hop as a share of the x16 rate: beyond PXB, or with P2P off.
SHM_SHARE: dict[LinkKind, float] = {LinkKind.PHB: 0.13, LinkKind.NODE: 0.115, LinkKind.SYS: 0.06}
# RDMA NIC line rate that NCCL reaches (46-48 GB/s of a 50 GB/s NDR port).
NET_EFFICIENCY = 0.94
# NIC-to-GPU distance: GPUDirect RDMA up to PXB (NCCL's default NCCL_NET_GDR_LEVEL); farther, bounce
# buffers in host memory cost bandwidth.
NIC_DISTANCE_SHARE: dict[LinkKind, float] = {
    LinkKind.PIX: 1.0,
    LinkKind.PXB: 1.0,
    LinkKind.PHB: 0.85,
    LinkKind.NODE: 0.75,
    LinkKind.SYS: 0.6,
}
# A NIC whose rate nobody reported (nvidia-smi text does not say it).
UNKNOWN_NIC_RATE_GBPS = 100.0

_EXACT_CUT_TABLE_GPUS = 12


@dataclass(frozen=True, slots=True)
class BusBandwidth:
    """An estimated all-reduce bus bandwidth (GB/s) and what limits it."""

    busbw_gbps: float
    bottleneck: str


def _set_name(mask: int) -> str:
    return "{" + ",".join(str(i) for i in range(mask.bit_length()) if mask >> i & 1) + "}"


def hop_gbps(topology: Topology, a: int, b: int) -> float:
    """What one ring hop between GPUs a and b carries in this model, GB/s per direction."""
    return topology_tables(topology).hop[a][b]


class TopologyTables:
    """The estimator's per-topology tables (hop bandwidths, NVLink adjacency, PCIe generations, cuts), built once."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        n = self.n = topology.gpu_count
        gens = [nvlink_generation(g) for g in topology.gpus]
        self.per_link = [g.per_link_gbps for g in gens]
        self.nvls = [g.nvls for g in gens]
        self.nvls_efficiency = [
            NVLS_ALGBW_EFFICIENCY_NVLINK5 if g.version >= 5 else NVLS_ALGBW_EFFICIENCY for g in gens
        ]
        self.pcie = [pcie_generation(g) for g in topology.gpus]
        self.hop = [[0.0] * n for _ in range(n)]
        self.direct = [[0.0] * n for _ in range(n)]  # direct NVLink GB/s per direction
        self.switch = [[0.0] * n for _ in range(n)]  # NVSwitch pair GB/s (the GPU's whole NVLink)
        self.nv_adj = [0] * n
        self.nvlink_counts = [[0] * n for _ in range(n)]  # usable NVLinks per pair
        self.switch_adj = [0] * n
        own_nvlink = [0.0] * n
        for (a, b), link in topology.links.items():
            gen = min(self.pcie[a], self.pcie[b])
            x16 = pcie_x16_gbps(gen)
            if link.usable_nvlink and link.nvlinks > 0:
                bw = link.nvlinks * min(self.per_link[a], self.per_link[b])
                hop = NVLINK_RING_EFFICIENCY * bw
                self.nv_adj[a] |= 1 << b
                self.nv_adj[b] |= 1 << a
                self.nvlink_counts[a][b] = self.nvlink_counts[b][a] = link.nvlinks
                if link.kind is LinkKind.NVSWITCH:
                    self.switch[a][b] = self.switch[b][a] = bw
                    self.switch_adj[a] |= 1 << b
                    self.switch_adj[b] |= 1 << a
                    own_nvlink[a] = max(own_nvlink[a], bw)
                    own_nvlink[b] = max(own_nvlink[b], bw)
                else:
                    self.direct[a][b] = self.direct[b][a] = bw
                    own_nvlink[a] += bw
                    own_nvlink[b] += bw
            elif link.state is LinkState.DOWN or link.is_nvlink:
                hop = SHM_SHARE[LinkKind.SYS] * x16
            elif link.kind in PCIE_P2P_SHARE:
                hop = PCIE_P2P_SHARE[link.kind] * x16
            else:
                hop = SHM_SHARE[link.kind] * x16
            self.hop[a][b] = self.hop[b][a] = hop
        self.any_switch = any(self.switch_adj)
        nv_hops = [self.hop[a][b] for a in range(n) for b in range(n) if self.nv_adj[a] >> b & 1]
        other_hops = [self.hop[a][b] for a in range(n) for b in range(n) if a != b and not self.nv_adj[a] >> b & 1]
        self.nvlink_dominates = min(nv_hops, default=0.0) >= max(other_hops, default=0.0)
        self.best_hop = [max(row) if n > 1 else 0.0 for row in self.hop]
        self.local = [
            max(
                NVLINK_RING_EFFICIENCY * own_nvlink[i],
                PCIE_P2P_SHARE[LinkKind.PIX] * pcie_x16_gbps(self.pcie[i]),
                c2c_gbps(topology.gpus[i]),
            )
            for i in range(n)
        ]
        # Exact min cuts on small nodes without NVSwitch; elsewhere the weakest single GPU's cut bounds
        # them. Chosen by link kinds, never by link states, so a link going down never switches methods.
        self.exact_cuts = n <= _EXACT_CUT_TABLE_GPUS and not any(
            link.kind is LinkKind.NVSWITCH for link in topology.links.values()
        )
        self._internal: list[float] | None = None
        self.cache: dict[int, BusBandwidth] = {}
        self._pair_sums: dict[int, float] = {0: 0.0}
        self._capacities: dict[int, list[list[float]]] = {}
        self._bits: dict[int, tuple[int, ...]] = {}
        self._nic_paths: dict[NcclSettings, tuple[tuple[NicPath, ...], ...]] = {}
        self._nearest: dict[int, tuple[int, ...]] = {}
        self.memo = Memo()  # derived views of this content (group rankings)

    def bits(self, mask: int) -> tuple[int, ...]:
        """The GPUs of a set, in index order."""
        found = self._bits.get(mask)
        if found is None:
            found = self._bits[mask] = tuple(i for i in range(self.n) if mask >> i & 1)
        return found

    def pair_sum(self, mask: int) -> float:
        """Sum of the hop bandwidths of every pair inside the set (how well connected it is)."""
        sums = self._pair_sums
        found = sums.get(mask)
        if found is None:
            low = mask & -mask
            i = low.bit_length() - 1
            rest = mask ^ low
            row = self.hop[i]
            total = self.pair_sum(rest)
            r = rest
            while r:
                lb = r & -r
                total += row[lb.bit_length() - 1]
                r ^= lb
            found = sums[mask] = total
        return found

    # -- one GPU set ----------------------------------------------------------------------------------------

    def estimate(self, mask: int) -> BusBandwidth:
        found = self.cache.get(mask)
        if found is None:
            found = self.cache[mask] = self._estimate(mask)
        return found

    def _estimate(self, mask: int) -> BusBandwidth:
        bits = self.bits(mask)
        k = len(bits)
        if k == 1:
            i = bits[0]
            return BusBandwidth(self.local[i], f"single GPU{i}: no intra-node hop")
        # Each candidate is (value, how to describe it); only the winner's description is built.
        best: tuple[float, str, tuple[int, ...]] = (0.0, "", ())
        if self._nvlink_connected(mask, bits[0]):
            cut, side = self._min_cut(mask, bits)
            best = (NVLINK_RING_EFFICIENCY * cut, "cut", (side, mask ^ side))
        # Prim is skipped where it cannot win: when every NVLink hop beats every PCIe hop, the ring over
        # an NVLink-connected set crosses its weakest cut on a hop no faster than that cut; otherwise
        # no spanning tree beats the weakest GPU's best hop.
        if not best[1] or (not self.nvlink_dominates and best[0] < min(self.best_hop[i] for i in bits)):
            value, a, b = self._spanning(bits)
            if value >= best[0]:
                best = (value, "hop", (a, b))
        if self.any_switch and all((self.switch_adj[i] | 1 << i) & mask == mask for i in bits):
            bw, a, b = min((self.switch[a][b], a, b) for x, a in enumerate(bits) for b in bits[x + 1 :])
            best = (best[0], "switch-ring", (a, b))
            if all(self.nvls[i] for i in bits):
                nvls = min(self.nvls_efficiency[i] for i in bits) * bw * 2 * (k - 1) / k
                if nvls > best[0]:
                    best = (nvls, "switch-nvls", (a, b))
        return BusBandwidth(best[0], self._describe(best[1], best[2], bits))

    def _describe(self, what: str, where: tuple[int, ...], bits: tuple[int, ...]) -> str:
        if what in ("switch-ring", "switch-nvls"):
            a, b = where
            bw = self.switch[a][b]
            text = f"NVSwitch NV{self.topology.link(a, b).nvlinks} ({bw:.0f} GB/s per GPU)"
            return f"{text}, {'NVLink SHARP' if what == 'switch-nvls' else 'ring'}"
        if what == "hop":
            return self._describe_hop(*where)
        side, other = where
        counts = self.nvlink_counts
        links = sum(counts[i][j] for i in bits if side >> i & 1 for j in bits if other >> j & 1)
        if side.bit_count() == 1 or other.bit_count() == 1:
            lone = side if side.bit_count() == 1 else other
            return f"GPU{lone.bit_length() - 1} has {links} NVLinks into the group"
        return f"NVLink cut {_set_name(side)}|{_set_name(other)}: {links} NVLinks across"

    def _spanning(self, bits: tuple[int, ...]) -> tuple[float, int, int]:
        """The best single ring's slowest hop: the bottleneck edge of the maximum spanning tree (Prim)."""
        hop = self.hop
        start = bits[0]
        rest = list(bits[1:])
        row = hop[start]
        value = [row[v] for v in rest]
        via = [start] * len(rest)
        low, low_a, low_b = float("inf"), start, start
        while rest:
            x = max(range(len(rest)), key=value.__getitem__)
            v = rest.pop(x)
            w = value.pop(x)
            u = via.pop(x)
            if w < low:
                low, low_a, low_b = w, min(u, v), max(u, v)
            row = hop[v]
            for y, other in enumerate(rest):
                if row[other] > value[y]:
                    value[y] = row[other]
                    via[y] = v
        return low, low_a, low_b

    def _describe_hop(self, a: int, b: int) -> str:
        link = self.topology.link(a, b)
        pair = f"GPU{a}-GPU{b}"
        if link.usable_nvlink and link.nvlinks:
            return f"{'NVSwitch' if link.kind is LinkKind.NVSWITCH else 'NVLink'} NV{link.nvlinks} hop {pair}"
        if link.state is LinkState.DOWN or link.is_nvlink:
            return f"{pair} {link.kind} link {link.state}: host-memory path"
        path = "PCIe P2P" if link.kind in PCIE_P2P_SHARE else "host memory (no P2P beyond PXB)"
        return f"PCIe {link.kind} hop {pair}, {path}"

    def _nvlink_connected(self, mask: int, start: int) -> bool:
        seen = frontier = 1 << start
        adj = self.nv_adj
        while frontier:
            nxt = 0
            f = frontier
            while f:
                low = f & -f
                nxt |= adj[low.bit_length() - 1]
                f ^= low
            frontier = nxt & mask & ~seen
            seen |= frontier
        return seen == mask

    def _capacity(self, k: int) -> list[list[float]]:
        """NVLink capacity per pair for a set of k GPUs: direct links, plus an NVSwitch pair's 1/(k-1) share."""
        if not any(self.switch_adj):
            return self.direct
        found = self._capacities.get(k)
        if found is None:
            share = 1.0 / (k - 1)
            found = self._capacities[k] = [
                [d + s * share for d, s in zip(dr, sr, strict=True)]
                for dr, sr in zip(self.direct, self.switch, strict=True)
            ]
        return found

    def _internal_table(self) -> list[float]:
        """Sum of direct NVLink capacity inside every subset of GPUs (only for small direct-NVLink nodes)."""
        if self._internal is None:
            n, direct = self.n, self.direct
            table = [0.0] * (1 << n)
            for mask in range(1, 1 << n):
                low = mask & -mask
                i = low.bit_length() - 1
                rest = mask ^ low
                total = table[rest]
                row = direct[i]
                r = rest
                while r:
                    lb = r & -r
                    total += row[lb.bit_length() - 1]
                    r ^= lb
                table[mask] = total
            self._internal = table
        return self._internal

    def _min_cut(self, mask: int, bits: tuple[int, ...]) -> tuple[float, int]:
        """The weakest cut of the set by NVLink capacity (GB/s per direction) and one side of it."""
        low = 1 << bits[0]
        others = mask ^ low
        best, best_side = float("inf"), 0
        if self.exact_cuts:
            table = self._internal_table()
            whole = table[mask]
            sub = (others - 1) & others  # every side that holds the lowest GPU, but not the whole set
            while sub:
                side = sub | low
                cut = whole - table[side] - table[others ^ sub]
                if cut < best:
                    best, best_side = cut, mask ^ side
                sub = (sub - 1) & others
            cut = whole - table[low] - table[others]
            if cut < best:
                best, best_side = cut, low
        else:
            cap = self._capacity(len(bits))
            for i in bits:
                row = cap[i]
                cut = sum(row[j] for j in bits)
                if cut < best:
                    best, best_side = cut, 1 << i
        return best, best_side

    # -- NICs -----------------------------------------------------------------------------------------------

    def paths(self, settings: NcclSettings) -> tuple[tuple[NicPath, ...], ...]:
        """``paths[g][j]``: how GPU g reaches NIC j under these NCCL settings."""
        found = self._nic_paths.get(settings)
        if found is None:
            nics = self.topology.nics
            found = self._nic_paths[settings] = tuple(
                tuple(nic_path(gpu, nic, settings) for nic in nics) for gpu in self.topology.gpus
            )
        return found

    def nearest(self, gpu: int) -> tuple[int, ...]:
        """Indices of the Up compute NICs NCCL counts as this GPU's own: every one at its nearest path type.

        NCCL's ``ncclTopoGetLocal``: the nearest path type (a NIC on a Grace GPU's own Grace is P2C, nearer
        than a PHB/NODE or SYS NIC), ties kept, so channels spread over all of them. Storage and front-end
        NICs are never rails. The order does not depend on the NCCL version.
        """
        found = self._nearest.get(gpu)
        if found is None:
            nics = self.topology.nics
            row = self.paths(DEFAULT_NCCL)[gpu]
            rails = [j for j, nic in enumerate(nics) if nic.up and nic.compute]
            keys = {j: (row[j].path.rank, PCIE_LEVELS.index(row[j].distance)) for j in rails}
            best = min(keys.values(), default=None)
            found = self._nearest[gpu] = tuple(j for j in rails if keys[j] == best)
        return found


# Tables shared by topologies with equal content (the 10,000 nodes of a cluster are a handful of node types,
# each read into its own Topology object): a bounded cache of a pure function, so sharing changes nothing
# but the time taken.
_SHARED: SharedTable[Hashable, TopologyTables] = SharedTable(limit=256)
# A topology's own reference to its tables (one per topology).
_OWN: Table[None, TopologyTables] = Table("estimator tables")


def _content(topology: Topology) -> Hashable:
    """Everything the estimator and the group ranking read from a topology."""
    return (
        tuple(
            (g.model, g.nvlink_version, g.pcie_generation, g.health, g.numa_node, g.c2c_links, g.c2c_gbps)
            for g in topology.gpus
        ),
        tuple((key, link.kind, link.nvlinks, link.state) for key, link in sorted(topology.links.items())),
        tuple((n.name, n.state, n.rate_gbps, n.affinity, n.role, n.numa_node) for n in topology.nics),
    )


def clear_shared_tables() -> None:
    """Forget the tables shared between equal topologies (benchmarks measure the first decision)."""
    _SHARED.clear()


def topology_tables(topology: Topology) -> TopologyTables:
    """The estimator's tables of a topology: its own, or those of an earlier topology with equal content."""
    own = topology.memo.table(_OWN)
    tables = own.get(None)
    if tables is None:
        tables = own[None] = _SHARED.get_or_build(_content(topology), lambda: TopologyTables(topology))
    return tables


def gpu_mask(topology: Topology, gpus: Sequence[int]) -> int:
    """The bit set of the GPUs, checked: each on the node, none twice, at least one."""
    mask = 0
    for g in gpus:
        if not 0 <= g < topology.gpu_count:
            raise TopologyError(f"no GPU{g}: the node has GPUs 0..{topology.gpu_count - 1}")
        if mask >> g & 1:
            raise TopologyError(f"GPU{g} is listed twice")
        mask |= 1 << g
    if not mask:
        raise TopologyError("no GPUs chosen")
    return mask


def estimate_node(topology: Topology, gpus: Sequence[int]) -> BusBandwidth:
    """Estimated all-reduce bus bandwidth of one node's GPU set (GB/s) and its bottleneck."""
    return topology_tables(topology).estimate(gpu_mask(topology, gpus))


def nvlink_fabric(topology: Topology, gpus: Sequence[int]) -> tuple[float, bool]:
    """The NVLink bandwidth (GB/s per direction) each chosen GPU has into an NVSwitch fabric, and whether all of
    them do NVLink SHARP; 0 when one of them has no fabric link.

    A GPU's figure is its best usable NVSwitch link (links * per-link: the GPU's whole NVLink), so a GPU whose
    fabric links are all Down, or that has only direct NVLink or PCIe, has none and cannot use a multi-node
    NVLink domain.
    """
    node = topology_tables(topology)
    bits = node.bits(gpu_mask(topology, gpus))
    gbps = min(max(node.switch[g]) if node.n > 1 else 0.0 for g in bits)
    return gbps, all(node.nvls[g] for g in bits)
