"""Placement on multi-node NVLink domains (NVL72 racks of GB200 trays): the rules users wrote by hand."""

from __future__ import annotations

from collections import Counter

import pytest
from placement_builders import clique, node, rack_snapshot, racks

from gputopo.control.facts import job_facts
from gputopo.control.validation import problems
from gputopo.placement import Placement, Request, Unplaceable, place
from gputopo.placement.gang import spanning_tier
from gputopo.placement.types import Snapshot, TierConfig
from gputopo.topology.gang import estimate_gang


def rack_of(name: str) -> str:
    return name.split("-")[0]


def per_rack(result: Placement | Unplaceable) -> list[int]:
    assert isinstance(result, Placement), result
    return sorted(Counter(rack_of(w.node) for w in result.workers).values(), reverse=True)


@pytest.mark.parametrize(
    ("workers", "slice_size", "expected"),
    [
        (24, None, [12, 12]),
        (24, 8, [8, 8, 8]),
        (24, 12, [12, 12]),
        (48, None, [16, 16, 16]),
        (12, None, [12]),
        (16, None, [16]),
        (18, None, [9, 9]),
        (32, 16, [16, 16]),
    ],
    ids=[
        "24-trays-2x12",
        "24-in-slices-of-8-3x8",
        "24-in-slices-of-12-2x12",
        "48-trays-3x16",
        "12-fits-one-rack",
        "16-is-the-cap",
        "18-over-the-cap-9+9",
        "32-in-slices-of-16",
    ],
)
def test_gangs_of_whole_trays(workers: int, slice_size: int | None, expected: list[int]) -> None:
    snap = rack_snapshot(*racks(4))
    result = place(snap, Request(workers, 4, slice_size=slice_size))
    assert per_rack(result) == expected
    assert isinstance(result, Placement) and len(set(result.nodes)) == workers, "one 4-GPU worker per tray"


def test_the_cap_is_configurable_and_counts_trays_in_use() -> None:
    assert per_rack(place(rack_snapshot(*racks(2), cap=18), Request(18, 4))) == [18]
    # Rack r0 has 10 trays busy: 6 more fit under its cap of 16, so an 8-tray gang goes to r1.
    snap = rack_snapshot(*racks(2, used={"r0": 10}))
    result = place(snap, Request(8, 4))
    assert isinstance(result, Placement) and {rack_of(n) for n in result.nodes} == {"r1"}
    small = place(snap, Request(6, 4))  # 6 fit in r0's room: best fit, r1 stays whole
    assert isinstance(small, Placement) and {rack_of(n) for n in small.nodes} == {"r0"}


@pytest.mark.parametrize(
    ("workers", "gpus"), [(1, 4), (4, 1), (2, 2)], ids=["one-4gpu-worker", "four-1gpu-workers", "two-2gpu-workers"]
)
def test_a_4_gpu_job_never_splits_a_tray(workers: int, gpus: int) -> None:
    # Trays with 2 free GPUs each, and whole free trays: the job takes one whole tray.
    nodes = [n.used(0, 1) if n.build().name.endswith(("t00", "t01", "t02")) else n for n in racks(1, trays=6)]
    result = place(rack_snapshot(*nodes), Request(workers, gpus))
    assert isinstance(result, Placement) and len(set(result.nodes)) == 1


def test_small_jobs_go_to_domains_already_in_use() -> None:
    snap = rack_snapshot(*racks(3, used={"r1": 3}))
    for workers, gpus in ((1, 1), (2, 4), (1, 4)):
        result = place(snap, Request(workers, gpus))
        assert isinstance(result, Placement) and {rack_of(n) for n in result.nodes} == {"r1"}
        snap = snap.reserve(result)
    assert sum(1 for n in snap if n.used_gpus and rack_of(n.name) != "r1") == 0, "r0 and r2 stay whole"


def test_a_partly_used_tray_takes_a_small_job_first() -> None:
    nodes = racks(2)
    nodes[20] = nodes[20].used(0)  # r1-t02: three GPUs free
    result = place(rack_snapshot(*nodes), Request(2, 1))
    assert isinstance(result, Placement) and result.nodes == ("r1-t02", "r1-t02")


def test_ranks_of_a_domain_are_contiguous() -> None:
    result = place(rack_snapshot(*racks(4)), Request(24, 4, slice_size=8))
    assert isinstance(result, Placement)
    order = [rack_of(w.node) for w in result.workers]
    runs = [r for i, r in enumerate(order) if i == 0 or order[i - 1] != r]
    assert len(runs) == len(set(runs)) == 3
    assert [w.rank for w in result.workers] == list(range(24))


def test_one_domain_is_much_faster_than_two() -> None:
    one = place(rack_snapshot(*racks(2)), Request(4, 4))
    two = place(rack_snapshot(*racks(2), cap=2), Request(4, 4))  # a cap of 2 trays splits it 2 + 2
    assert per_rack(one) == [4] and per_rack(two) == [2, 2]
    assert isinstance(one, Placement) and isinstance(two, Placement)
    assert "NVLink domain" in one.bottleneck and one.busbw_gbps > 750
    assert two.busbw_gbps < one.busbw_gbps / 2 and "network" in two.bottleneck


def test_degraded_fabric_trays_are_left_out() -> None:
    nodes = [*racks(1, trays=4), node("lone", "gb200-tray").in_rack("r9").fabric_degraded()]
    snap = rack_snapshot(*nodes)
    result = place(snap, Request(5, 4))
    assert isinstance(result, Unplaceable)
    assert "needs 5 trays within 2 NVLink domains" in result.reason
    assert any("unhealthy NVLink fabric" in d for d in result.details)


@pytest.mark.parametrize(
    ("snap", "request_", "words"),
    [
        (
            rack_snapshot(*racks(3, used={"r0": 9, "r1": 11, "r2": 13})),
            Request(24, 4, slice_size=8),
            "needs 24 trays in slices of 8 within 3 NVLink domains; the emptiest domains have 7, 5 and 3 free trays",
        ),
        (
            rack_snapshot(*racks(1, trays=4)),
            Request(8, 4),
            "needs 8 trays within 2 NVLink domains; the emptiest domains have 4 free trays",
        ),
    ],
    ids=["slices-of-8", "one-small-rack"],
)
def test_unplaceable_in_domain_terms(snap: Snapshot, request_: Request, words: str) -> None:
    result = place(snap, request_)
    assert isinstance(result, Unplaceable)
    assert result.reason == words


def test_domain_comes_from_labels_too() -> None:
    # GPU Feature Discovery's label alone (a topology without fabric info) makes the node a domain member.
    nodes = [node(f"t{i}", "gb200-tray").label("nvidia.com/gpu.clique", clique("rx")) for i in range(3)]
    snap = rack_snapshot(*nodes)
    assert set(snap.nvlink_domains) == {clique("rx")}
    result = place(snap, Request(3, 4))
    assert isinstance(result, Placement) and "NVLink domain" in result.bottleneck


CLIQUE_LABELS = [
    ("gfd-alone", {"nvidia.com/gpu.clique": "gfd"}, "gfd"),
    ("probe-alone", {"gputopo.io/nvlink.clique": "probe"}, "probe"),
    ("gfd-wins-over-the-probe", {"gputopo.io/nvlink.clique": "probe", "nvidia.com/gpu.clique": "gfd"}, "gfd"),
    ("empty-gfd-label-is-no-label", {"gputopo.io/nvlink.clique": "probe", "nvidia.com/gpu.clique": ""}, "probe"),
]


@pytest.mark.parametrize(("case", "labels", "domain"), CLIQUE_LABELS, ids=[c[0] for c in CLIQUE_LABELS])
def test_gpu_feature_discoverys_clique_outranks_the_probes(case: str, labels: dict[str, str], domain: str) -> None:
    built = node("t0", "gb200-tray")
    for key, value in labels.items():
        built = built.label(key, value)
    assert built.build().nvlink_domain == domain, case


@pytest.mark.parametrize(
    ("workers", "gpus", "cap"),
    [(24, 4, 16), (4, 4, 2), (3, 1, 16), (40, 4, 16), (6, 2, 1)],
    ids=["2x12", "2+2", "one-tray", "three-racks", "cap-1-2-gpu-workers"],
)
def test_the_placed_figure_is_the_topology_estimate(workers: int, gpus: int, cap: int) -> None:
    snap = rack_snapshot(*racks(4), cap=cap)
    result = place(snap, Request(workers, gpus))
    assert isinstance(result, Placement)
    by_node: dict[str, list[int]] = {}
    for w in result.workers:
        by_node.setdefault(w.node, []).extend(w.gpus)
    tier, _ = spanning_tier(snap, [snap.index_of(n) for n in by_node])
    expected = estimate_gang(
        [(snap.node(n).topology, sorted(g)) for n, g in by_node.items()],
        oversubscription=snap.tiers.oversubscription(tier),
        domains=[snap.nvlink_domains[snap.index_of(n)] for n in by_node],
    )
    assert result.busbw_gbps == pytest.approx(expected.busbw_gbps, rel=1e-12)


@pytest.mark.parametrize(
    ("workers", "slice_size", "invalid"),
    [(24, 8, False), (24, 7, True), (24, None, False)],
    ids=["divides", "does-not-divide", "no-slice"],
)
def test_slice_size_comes_from_the_spec_and_must_divide_workers(
    workers: int, slice_size: int | None, invalid: bool
) -> None:
    topology = {} if slice_size is None else {"sliceSize": slice_size}
    body = {
        "metadata": {"namespace": "ns", "name": "tj"},
        "spec": {
            "workers": workers, "gpusPerWorker": 4, "topology": topology,
            "template": {"spec": {"containers": [{"name": "w"}]}},
        },
    }  # fmt: skip
    facts = job_facts(body)
    assert facts.spec is not None
    assert Request.from_spec(facts.spec).slice_size == slice_size
    found = problems(facts, TierConfig())
    assert bool(found) == invalid
    if invalid:
        assert found == ["topology.sliceSize 7 does not divide workers 24: every NVLink domain takes whole slices"]
