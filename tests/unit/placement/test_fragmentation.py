"""Inside a node: a job's GPUs are chosen so that the jobs after it fare as well as the best sequence would,
and ties in bus bandwidth go to GPUs on one NUMA node, near one NIC.

Each allocation chain places jobs one after another with the engine and checks every job's bus bandwidth
against an exhaustive search over all sequences of GPU subsets: the best sequence maximises the first job's
figure, then the second's, and so on (each job takes the fastest group it can; what it leaves decides the
rest).
"""

from __future__ import annotations

from functools import cache
from itertools import combinations, product

import pytest

from gputopo.placement import NodeInfo, Placement, Request, Snapshot, place
from gputopo.topology import Topology, estimate_node, parse_nvidia_smi, well_connected_groups
from gputopo.topology.catalog import fixture_text, load_node_type

# DGX-1 with P100: the same hybrid cube mesh as the V100 model, but P100 has four NVLinks, one per
# neighbour (three in its quad, one across), so every NV2 of the V100 matrix is an NV1.
_P100 = fixture_text("dgx1-v100-8gpu-cubemesh-4xmlx5.txt").replace("NV2", "NV1")

# Four Quadro RTX 8000 in a dual-socket workstation, NVLink bridges (two Turing links) on pairs 0-1 and 2-3;
# the matrix is written from that wiring, in nvidia-smi's format.
_RTX8000 = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV2\tSYS\tSYS\t0-23\t0
GPU1\tNV2\t X \tSYS\tSYS\t0-23\t0
GPU2\tSYS\tSYS\t X \tNV2\t24-47\t1
GPU3\tSYS\tSYS\tNV2\t X \t24-47\t1
"""

TOPOLOGIES: dict[str, Topology] = {
    "dgx1-v100": load_node_type("dgx1-v100"),
    "dgx1-p100": parse_nvidia_smi(_P100, gpu_model="Tesla P100-SXM2-16GB"),
    "4x-rtx8000-bridged": parse_nvidia_smi(_RTX8000, gpu_model="Quadro RTX 8000"),
    "8x-h100-nvl-pairs": load_node_type("h100-nvl-pairs"),
}

# Which GPUs are already used when each chain starts: idle nodes, and the cube mesh with some GPUs taken.
STARTS: dict[str, tuple[tuple[int, ...], ...]] = {
    "dgx1-v100": ((), (0,), (3,), (0, 5), (1, 6)),
    "dgx1-p100": ((), (0,), (2, 7)),
    "4x-rtx8000-bridged": ((), (0,)),
    "8x-h100-nvl-pairs": ((), (1,)),
}

CHAINS = [chain for length in (2, 3, 4) for chain in product((1, 2, 4, 8), repeat=length)]


def _best_sequence(topology: Topology, used: tuple[int, ...], chain: tuple[int, ...]) -> tuple[float | None, ...]:
    n = topology.gpu_count

    @cache
    def best(free: int, i: int) -> tuple[float | None, ...]:
        if i == len(chain):
            return ()
        found: tuple[float | None, ...] | None = None
        for gpus in combinations([g for g in range(n) if free >> g & 1], chain[i]):
            mask = sum(1 << g for g in gpus)
            value = (round(estimate_node(topology, gpus).busbw_gbps, 6), *best(free & ~mask, i + 1))
            if found is None or value > found:  # type: ignore[operator]
                found = value
        return found if found is not None else (None,) * (len(chain) - i)

    return best(sum(1 << g for g in range(n) if g not in used), 0)


def _engine_sequence(topology: Topology, used: tuple[int, ...], chain: tuple[int, ...]) -> tuple[float | None, ...]:
    snap = Snapshot([NodeInfo("n", topology, used_gpus=frozenset(used))])
    figures: list[float | None] = []
    for k in chain:
        result = place(snap, Request(1, k))
        if not isinstance(result, Placement):
            figures.append(None)
            continue
        figures.append(round(result.busbw_gbps, 6))
        snap = snap.reserve(result)
    return tuple(figures)


def _cases() -> list[object]:
    cases = []
    for name, starts in STARTS.items():
        topology = TOPOLOGIES[name]
        for used in starts:
            for chain in CHAINS:
                if sum(chain) > topology.gpu_count - len(used):
                    continue
                where = "idle" if not used else "used-" + "-".join(map(str, used))
                cases.append(pytest.param(name, used, chain, id=f"{name}-{where}-jobs-{'-'.join(map(str, chain))}"))
    return cases


@pytest.mark.parametrize(("name", "used", "chain"), _cases())
def test_each_next_job_gets_what_the_best_sequence_gives(
    name: str, used: tuple[int, ...], chain: tuple[int, ...]
) -> None:
    topology = TOPOLOGIES[name]
    assert _engine_sequence(topology, used, chain) == _best_sequence(topology, used, chain)


def test_a_pair_on_an_idle_dgx1_leaves_a_whole_quad() -> None:
    snap = Snapshot([NodeInfo("n", TOPOLOGIES["dgx1-v100"])])
    pair = place(snap, Request(1, 2))
    assert isinstance(pair, Placement)
    quad = place(snap.reserve(pair), Request(1, 4))
    assert isinstance(quad, Placement)
    assert quad.busbw_gbps == pytest.approx(78.0)  # not 58.5: the pair did not break both quads
    assert set(pair.workers[0].gpus) <= {0, 1, 2, 3} or set(pair.workers[0].gpus) <= {4, 5, 6, 7}


@pytest.mark.parametrize(
    ("name", "free", "k", "expected"),
    [
        ("hgx-h100", range(8), 2, (0, 1)),
        ("hgx-h100", (3, 4, 5), 2, (4, 5)),
        ("hgx-h100", range(8), 4, (0, 1, 2, 3)),
        ("dgx-a100", (0, 2, 4), 2, (0, 2)),
    ],
    ids=["nvswitch-pair-on-one-socket", "nvswitch-pair-not-across-sockets", "nvswitch-quad-on-one-socket",
         "nps4-pair-on-fewest-numa-nodes"],
)  # fmt: skip
def test_bandwidth_ties_go_to_one_numa_node(
    name: str, free: range | tuple[int, ...], k: int, expected: tuple[int, ...]
) -> None:
    topology = load_node_type(name)
    used = frozenset(range(topology.gpu_count)) - frozenset(free)
    result = place(Snapshot([NodeInfo("n", topology, used_gpus=used)]), Request(1, k))
    assert isinstance(result, Placement)
    assert result.workers[0].gpus == expected
    assert well_connected_groups(topology, free, k, limit=1)[0].gpus == expected


def test_bandwidth_ties_go_to_gpus_near_one_nic() -> None:
    # Every pair crosses the same PCIe host bridge; GPUs 0-1 and 2-3 each sit behind one NIC's switch.
    text = """\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tmlx5_1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\tPHB\tPHB\tPIX\tPHB\t0-23\t0
GPU1\tPHB\t X \tPHB\tPHB\tPIX\tPHB\t0-23\t0
GPU2\tPHB\tPHB\t X \tPHB\tPHB\tPIX\t0-23\t0
GPU3\tPHB\tPHB\tPHB\t X \tPHB\tPIX\t0-23\t0
mlx5_0\tPIX\tPIX\tPHB\tPHB\t X \tPHB
mlx5_1\tPHB\tPHB\tPIX\tPIX\tPHB\t X
"""
    topology = parse_nvidia_smi(text, gpu_model="NVIDIA L40S")
    result = place(Snapshot([NodeInfo("n", topology, used_gpus=frozenset({0}))]), Request(1, 2))
    assert isinstance(result, Placement)
    assert result.workers[0].gpus == (2, 3)
    assert well_connected_groups(topology, (1, 2, 3), 2, limit=1)[0].gpus == (2, 3)


def test_numa_node_comes_from_cpu_affinity_when_the_matrix_has_no_numa_column() -> None:
    topology = TOPOLOGIES["dgx1-v100"]
    assert [g.numa_node for g in topology.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("name", "used", "workers", "k"),
    [("8x-h100-nvl-pairs", (0, 2, 3), 2, 1), ("dgx1-v100", (0, 5), 2, 2), ("dgx1-v100", (), 4, 1)],
    ids=["nvl-two-single-gpu-workers", "v100-two-pair-workers-with-gpus-used", "v100-four-single-gpu-workers"],
)
def test_several_workers_on_one_node_are_chosen_together(
    name: str, used: tuple[int, ...], workers: int, k: int
) -> None:
    # Chosen one after another, the first 1-GPU worker on the NVL node took GPU 1 (its partner was gone, so
    # no pair was broken) and left the second only PCIe: 3.78 GB/s where a bridged pair gives 234.
    topology = TOPOLOGIES[name]
    snap = Snapshot([NodeInfo("n", topology, used_gpus=frozenset(used))])
    result = place(snap, Request(workers, k))
    assert isinstance(result, Placement)
    assert result.busbw_gbps == pytest.approx(_best_sequence(topology, used, (workers * k,))[0])
