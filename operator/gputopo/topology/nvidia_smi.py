"""Read (and print) the matrix of ``nvidia-smi topo -m``.

What real machines print varies, and all of it is read: tabs or runs of spaces; shell prompt lines and
comments before the matrix; ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` columns (with empty
cells); NIC columns named ``NIC#`` with a ``NIC Legend`` block naming them, or named by their device
(``mlx5_0``) in old drivers; the old legend (``SOC`` for ``SYS``, "PCIe switches"); no legend at all;
``N/A`` cells; a trailing (or leading) ``nvidia-smi topo -p2p`` matrix; 1 to any number of GPUs; NV#
values that differ pair by pair.

What the text says, and what is made of it:

* ``NV#`` where the row's GPU reaches the column's over # bonded NVLinks. If one GPU of a pair shows
  fewer links than its twin cell, the link is Degraded and has the smaller count; if only one side shows
  NVLink at all, it is a Degraded NVLink.
* NVSwitch is told from the counts: when a GPU's NV# values add up to more links than a GPU has (its
  model's count, or 18 when the model is unknown), the board is NVSwitch and every NV pair becomes an
  NVSwitch link. A pair below the board's count is Degraded (a GPU lost links to the fabric).
* With direct links (DGX-1, Polaris, bridges), a pair joining two GPUs that both have fewer links in
  total than the board's best GPU is Degraded.
* ``N/A`` in a GPU or NIC cell is taken as SYS (the farthest level: nothing better is known).

A truncated or malformed matrix raises ``NvidiaSmiParseError`` naming the 1-based line and the token;
nothing half-parsed is returned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology.bandwidth import MAX_NVLINKS_PER_GPU, gpu_spec
from gputopo.topology.model import PCIE_LEVELS, Gpu, Link, Nic, SystemFacts, Topology, TopologyError

__all__ = ["NvidiaSmiParseError", "parse_nvidia_smi", "parse_nvidia_smi_all", "render_nvidia_smi"]


class NvidiaSmiParseError(TopologyError):
    """The text is not a whole ``nvidia-smi topo -m`` matrix; ``line`` is 1-based, ``token`` the culprit."""

    def __init__(self, line: int, token: str, message: str) -> None:
        self.line = line
        self.token = token
        self.reason = message
        super().__init__(f"line {line}: {message} (token {token!r})")


_PCIE_CELLS: dict[str, LinkKind] = {
    "PIX": LinkKind.PIX,
    "PXB": LinkKind.PXB,
    "PHB": LinkKind.PHB,
    "NODE": LinkKind.NODE,
    "SYS": LinkKind.SYS,
    "SOC": LinkKind.SYS,  # drivers before NODE existed
    "N/A": LinkKind.SYS,
}
_NV_CELL = re.compile(r"NV(\d+)")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_CUT_SHORT = "nvidia-smi topo -m output is cut short"
_P2P_CELLS = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "U", "DR", "NA"})
# Header words that start the non-device columns; multi-word column names as nvidia-smi spells them.
_EXTRA_START = frozenset({"CPU", "NUMA", "GPU", "AFFINITY", "ID"})
_EXTRA_NAMES = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_CPU_LIST = re.compile(r"N/A|\d+(-\d+)?(,\d+(-\d+)?)*")
_NUMA_VALUE = re.compile(r"N/A|\d+(-\d+)?(,\d+(-\d+)?)*")


@dataclass
class _Block:
    """One matrix as read: its header, and each device's row of cells."""

    header_line: int
    devices: list[str]
    gpu_count: int
    extras: list[str]
    rows: dict[str, list[str]] = field(default_factory=dict)
    row_lines: dict[str, int] = field(default_factory=dict)
    affinity: dict[str, list[str]] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)
    p2p: bool = False


def _is_header(tokens: Sequence[str]) -> bool:
    return len(tokens) >= 1 and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X")


def _read_header(tokens: list[str], line_no: int) -> _Block:
    devices: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i].upper() not in _EXTRA_START:
        devices.append(tokens[i])
        i += 1
    extras = _EXTRA_NAMES.findall(" ".join(tokens[i:]))
    gpu_count = 0
    for name in devices:
        match = _GPU_LABEL.fullmatch(name)
        if match is None:
            break
        if int(match.group(1)) != gpu_count:
            raise NvidiaSmiParseError(line_no, name, f"expected column GPU{gpu_count} in the header")
        gpu_count += 1
    seen: set[str] = set()
    for name in devices[gpu_count:]:
        if _GPU_LABEL.fullmatch(name):
            raise NvidiaSmiParseError(line_no, name, "a GPU column after the NIC columns")
        if name in seen:
            raise NvidiaSmiParseError(line_no, name, "a column named twice")
        seen.add(name)
    return _Block(line_no, devices, gpu_count, extras)


def _cell(token: str) -> tuple[LinkKind, int] | None:
    """A device cell as (kind, NVLinks), or None when it is not one."""
    if token in _PCIE_CELLS:
        return _PCIE_CELLS[token], 0
    match = _NV_CELL.fullmatch(token)
    if match and int(match.group(1)) > 0:
        return LinkKind.NVLINK, int(match.group(1))
    return None


def _read_row(block: _Block, label: str, tokens: list[str], line_no: int) -> None:
    n_dev = len(block.devices)
    cells = tokens[1 : 1 + n_dev]
    if len(cells) < n_dev:
        raise NvidiaSmiParseError(
            line_no, tokens[-1], f"{_CUT_SHORT}: the {label} row has {len(cells)} of {n_dev} device columns"
        )
    if not block.rows and any(c in _P2P_CELLS for c in cells):
        block.p2p = True
    if block.p2p:
        block.rows[label] = cells
        block.row_lines[label] = line_no
        return
    own = block.devices.index(label)
    for col, token in enumerate(cells):
        if col == own:
            if token != "X":
                raise NvidiaSmiParseError(line_no, token, f"row {label} must have X in its own column")
            continue
        parsed = _cell(token)
        if parsed is None:
            raise NvidiaSmiParseError(line_no, token, f"row {label}, column {block.devices[col]}: not a link")
        if parsed[0] is LinkKind.NVLINK and (col >= block.gpu_count or own >= block.gpu_count):
            raise NvidiaSmiParseError(line_no, token, f"NVLink between {label} and a NIC")
    rest = tokens[1 + n_dev :]
    if len(rest) > len(block.extras):
        bad = rest[len(block.extras)]
        raise NvidiaSmiParseError(line_no, bad, f"row {label} has more cells than the header has columns")
    for name, token in zip(block.extras, rest, strict=False):
        if name in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"):
            pattern = _CPU_LIST if name == "CPU Affinity" else _NUMA_VALUE
            if not pattern.fullmatch(token):
                raise NvidiaSmiParseError(line_no, token, f"row {label}: not a {name} value")
    block.rows[label] = cells
    block.row_lines[label] = line_no
    block.affinity[label] = rest


def _blocks(text: str) -> list[_Block]:
    lines = text.splitlines()
    blocks: list[_Block] = []
    current: _Block | None = None
    for number, raw in enumerate(lines, start=1):
        tokens = raw.split()
        if current is not None and len(current.rows) < len(current.devices):
            label = tokens[0] if tokens else ""
            if label not in current.devices or label in current.rows:
                missing = next(d for d in current.devices if d not in current.rows)
                found = raw.strip() or "an empty line"
                raise NvidiaSmiParseError(
                    number, label, f"{_CUT_SHORT}: expected the row for {missing}, found {found!r}"
                )
            _read_row(current, label, tokens, number)
            continue
        if _is_header(tokens):
            current = _read_header(tokens, number)
            blocks.append(current)
            continue
        if current is not None:
            legend = _NIC_LEGEND.fullmatch(raw)
            if legend:
                current.nic_legend[legend.group(1)] = legend.group(2)
    if current is not None and len(current.rows) < len(current.devices):
        missing = next(d for d in current.devices if d not in current.rows)
        raise NvidiaSmiParseError(max(len(lines), 1), "", f"{_CUT_SHORT}: it ends before the row for {missing}")
    return blocks


def _merge(a: tuple[LinkKind, int], b: tuple[LinkKind, int]) -> tuple[LinkKind, int, LinkState]:
    """The link of a GPU pair from its two cells (row a's and row b's)."""
    (ka, na), (kb, nb) = a, b
    if ka is LinkKind.NVLINK and kb is LinkKind.NVLINK:
        return LinkKind.NVLINK, min(na, nb), LinkState.UP if na == nb else LinkState.DEGRADED
    if ka is LinkKind.NVLINK or kb is LinkKind.NVLINK:
        return LinkKind.NVLINK, max(na, nb), LinkState.DEGRADED
    return max(ka, kb, key=PCIE_LEVELS.index), 0, LinkState.UP


def _numa(values: list[str], extras: list[str], cpu_sets: list[str]) -> int | None:
    """The GPU's NUMA node: its ``NUMA Affinity`` cell, else the rank of its ``CPU Affinity`` set.

    Older drivers print only CPU affinity; GPUs with the same CPU list sit on one socket, so distinct lists
    are numbered in order of appearance (which socket is which does not matter, only which GPUs share one).
    """
    for name, token in zip(extras, values, strict=False):
        if name == "NUMA Affinity" and token.isdigit():
            return int(token)
    if "NUMA Affinity" in extras:
        return None
    for name, token in zip(extras, values, strict=False):
        if name == "CPU Affinity" and token in cpu_sets:
            return cpu_sets.index(token)
    return None


def _cpu_sets(block: _Block, gpu_labels: list[str]) -> list[str]:
    """The distinct ``CPU Affinity`` lists of the GPUs, in order of appearance."""
    found: list[str] = []
    for label in gpu_labels:
        for name, token in zip(block.extras, block.affinity.get(label, []), strict=False):
            if name == "CPU Affinity" and token not in found:
                found.append(token)
    return found


def _extra(block: _Block, label: str, name: str) -> str | None:
    """The row's cell in the named non-device column, None when the row has none."""
    for column, token in zip(block.extras, block.affinity.get(label, []), strict=False):
        if column == name:
            return token
    return None


def _grace(block: _Block, gpu_labels: list[str], gpu_model: str | None, c2c: bool | None) -> str:
    """Why the GPUs are taken to reach a Grace CPU over NVLink-C2C ('' when they are not).

    Stated (``c2c``), a Grace GPU model, or, with no model named, a ``GPU NUMA ID`` for every GPU: only GPUs
    whose memory is a NUMA node of their CPU have one (it can also be N/A on a Grace system, so pass the model).
    """
    if c2c is not None:
        return "stated" if c2c else ""
    spec = gpu_spec(gpu_model or "")
    if spec is not None:
        return f"GPU model {gpu_model}" if spec.c2c_links else ""
    ids = [_extra(block, label, "GPU NUMA ID") for label in gpu_labels]
    if gpu_labels and all(i is not None and i.isdigit() for i in ids):
        return "GPU NUMA IDs " + ",".join(str(i) for i in ids)
    return ""


def _gpu_span(gpus: list[int]) -> str:
    if len(gpus) > 1 and gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPU{gpus[0]}-{gpus[-1]}"
    return ",".join(f"GPU{g}" for g in gpus)


def _nic_span(names: list[str]) -> str:
    return ",".join(names) if len(names) <= 2 else f"{names[0]}..{names[-1]}"


def _grace_nics(gpus: list[Gpu], nics: list[Nic], assumptions: list[str]) -> list[Nic]:
    """On a Grace node whose matrix shows every NIC SYS to every GPU (GB200 trays do), nothing says which
    Grace a NIC hangs off: they are spread over the GPUs' NUMA nodes in order, evenly, as GB200 trays are built."""
    graces = list(dict.fromkeys(g.numa_node for g in gpus if g.numa_node is not None))
    unplaced = [j for j, nic in enumerate(nics) if all(k is LinkKind.SYS for k in nic.affinity)]
    if not unplaced or not graces:
        if unplaced:
            assumptions.append(
                f"every NIC is SYS to every GPU and the GPUs' NUMA nodes are not shown: no NIC is taken as "
                f"on a GPU's own Grace ({len(unplaced)} NICs without GPUDirect RDMA)"
            )
        return nics
    placed = list(nics)
    share = -(-len(unplaced) // len(graces))
    parts = []
    for k, numa in enumerate(graces):
        mine = unplaced[k * share : (k + 1) * share]
        if not mine:
            continue
        for j in mine:
            placed[j] = replace(nics[j], numa_node=numa)
        owners = [g.index for g in gpus if g.numa_node == numa]
        parts.append(f"{_nic_span([nics[j].name for j in mine])} on the Grace of {_gpu_span(owners)} (NUMA {numa})")
    assumptions.append("every NIC is SYS to every GPU; taken as " + "; ".join(parts))
    return placed


def _topology(block: _Block, gpu_model: str | None, c2c: bool | None = None) -> Topology:
    n = block.gpu_count
    gpu_labels = block.devices[:n]
    nic_labels = block.devices[n:]
    cells = {label: [_cell(c) for c in block.rows[label]] for label in block.devices}
    spec = gpu_spec(gpu_model or "")
    links: dict[tuple[int, int], tuple[LinkKind, int, LinkState]] = {}
    for a in range(n):
        for b in range(a + 1, n):
            ca, cb = cells[gpu_labels[a]][b], cells[gpu_labels[b]][a]
            assert ca is not None and cb is not None
            links[(a, b)] = _merge(ca, cb)
    totals = [0] * n
    for (a, b), (kind, count, _) in links.items():
        if kind is LinkKind.NVLINK:
            totals[a] += count
            totals[b] += count
    max_links = spec.nvlinks if spec is not None and spec.nvlinks else MAX_NVLINKS_PER_GPU
    nvswitch = any(t > max_links for t in totals)
    nv_counts = [count for kind, count, _ in links.values() if kind is LinkKind.NVLINK]
    board = max(nv_counts, default=0)
    best_total = max(totals, default=0)
    built: list[Link] = []
    for (a, b), (kind, count, state) in links.items():
        if kind is LinkKind.NVLINK:
            if nvswitch:
                kind = LinkKind.NVSWITCH
                if count < board:
                    state = LinkState.DEGRADED
            elif totals[a] < best_total and totals[b] < best_total:
                state = LinkState.DEGRADED
        built.append(Link(a, b, kind, count, state))
    gpus = []
    cpu_sets = _cpu_sets(block, list(gpu_labels))
    grace = _grace(block, list(gpu_labels), gpu_model, c2c)
    c2c_links = (spec.c2c_links if spec is not None and spec.c2c_links else 1) if grace else 0
    for i, label in enumerate(gpu_labels):
        numa = _numa(block.affinity.get(label, []), block.extras, cpu_sets)
        numa_cell = _extra(block, label, "NUMA Affinity")
        if grace and numa is None and numa_cell is not None and re.match(r"\d+,", numa_cell):
            numa = int(numa_cell.split(",")[0])  # Grace: its CPU's node, then the GPU memory's own nodes
        gpus.append(
            Gpu(
                index=i,
                model=gpu_model or "",
                architecture=spec.architecture if spec else "",
                numa_node=numa,
                nvlink_version=spec.nvlink.version if spec and spec.nvlink else 0,
                c2c_links=c2c_links,
            )
        )
    assumptions: list[str] = []
    if grace:
        assumptions.append(f"{_gpu_span(list(range(n)))} reach their Grace CPU by NVLink-C2C ({grace})")
        if spec is None or not spec.c2c_gbps:
            assumptions.append("GPU model not named: NVLink-C2C bandwidth taken as a Grace Blackwell GPU's")
    nics: list[Nic] = []
    for j, label in enumerate(nic_labels):
        affinity: list[LinkKind] = []
        for label_gpu in gpu_labels:
            cell = cells[label_gpu][n + j]
            assert cell is not None
            affinity.append(cell[0])
        near = min(range(n), key=lambda g: PCIE_LEVELS.index(affinity[g])) if n else None
        numa = None
        if near is not None and affinity[near] is not LinkKind.SYS:
            numa = gpus[near].numa_node
        nics.append(Nic(name=block.nic_legend.get(label, label), numa_node=numa, affinity=tuple(affinity)))
    if grace and nics:
        nics = _grace_nics(gpus, nics, assumptions)
        assumptions.append(f"NIC roles not stated: all {len(nics)} NICs taken as compute rails")
    system = SystemFacts(nvswitch=nvswitch, assumptions=tuple(assumptions))
    return Topology.build(gpus, built, nics, system)


def parse_nvidia_smi_all(text: str, *, gpu_model: str | None = None, c2c: bool | None = None) -> list[Topology]:
    """Every ``topo -m`` matrix in the text, in order (``topo -p2p`` matrices are skipped).

    ``c2c`` states whether the GPUs reach a Grace CPU over NVLink-C2C; None infers it (see ``_grace``).
    """
    topologies = [_topology(b, gpu_model, c2c) for b in _blocks(text) if not b.p2p]
    if not topologies:
        lines = text.splitlines()
        for number, line in enumerate(lines, start=1):
            if line.split()[:2] == ["GPU0", "X"]:
                raise NvidiaSmiParseError(
                    number,
                    "GPU0",
                    f"{_CUT_SHORT}: the matrix starts at the GPU0 row, with no header line naming its columns",
                )
        first = next((ln.split()[0] for ln in lines if ln.split()), "")
        raise NvidiaSmiParseError(1, first, "no `nvidia-smi topo -m` matrix: no header line starting with GPU0")
    return topologies


def parse_nvidia_smi(text: str, *, gpu_model: str | None = None, c2c: bool | None = None) -> Topology:
    """The topology of the (first) ``nvidia-smi topo -m`` matrix in the text.

    ``gpu_model`` names the GPU, which the text does not; its NVLink generation sets the bandwidth.
    ``c2c``: the GPUs reach a Grace CPU over NVLink-C2C (None: inferred from the model or the GPU NUMA IDs).
    What the import had to assume is in ``topology.system.assumptions``.
    """
    return parse_nvidia_smi_all(text, gpu_model=gpu_model, c2c=c2c)[0]


def cell_text(topology: Topology, a: int, b: int) -> str:
    """What nvidia-smi prints for the GPU pair: X, NV#, or the PCIe level (a Down NVLink shows as SYS)."""
    if a == b:
        return "X"
    link = topology.link(a, b)
    if link.is_nvlink:
        return f"NV{link.nvlinks}" if link.usable_nvlink and link.nvlinks else "SYS"
    return str(link.kind)


def _nic_nic(x: Nic, y: Nic) -> str:
    if x is y:
        return "X"
    if not x.affinity or not y.affinity:
        return "SYS"
    # Two NICs are as close as the farther of their distances through their common nearest GPU.
    best = min(
        (max(kx, ky, key=PCIE_LEVELS.index) for kx, ky in zip(x.affinity, y.affinity, strict=True)),
        key=PCIE_LEVELS.index,
    )
    return str(best)


_LEGEND = (
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)


def render_nvidia_smi(topology: Topology) -> str:
    """The topology as ``nvidia-smi topo -m`` prints it (tab-separated, with legends)."""
    n = topology.gpu_count
    nic_labels = [f"NIC{j}" for j in range(len(topology.nics))]
    header = [f"GPU{i}" for i in range(n)] + nic_labels + ["NUMA Affinity"]
    out = ["\t" + "\t".join(header)]
    for a in range(n):
        cells = [" X " if a == b else cell_text(topology, a, b) for b in range(n)]
        cells += [str(nic.distance(a)) for nic in topology.nics]
        numa = topology.gpus[a].numa_node
        cells.append("N/A" if numa is None else str(numa))
        out.append(f"GPU{a}\t" + "\t".join(cells))
    for j, nic in enumerate(topology.nics):
        cells = [str(nic.distance(g)) for g in range(n)]
        cells += [" X " if nic is other else _nic_nic(nic, other) for other in topology.nics]
        out.append(f"{nic_labels[j]}\t" + "\t".join(cells))
    out += ["", "Legend:", "", *_LEGEND]
    if topology.nics:
        out += ["", "NIC Legend:", ""]
        out += [f"  {label}: {nic.name}" for label, nic in zip(nic_labels, topology.nics, strict=True)]
    return "\n".join(out) + "\n"
