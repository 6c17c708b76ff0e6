"""The estimator against published nccl-tests all_reduce_perf bus bandwidths.

Prints every row (pytest -s shows it): predicted, published, error, or why the row is set aside.
"""

from __future__ import annotations

import pytest

from gputopo.topology.calibration import (
    CASES,
    GRACE_CASES,
    MAX_MEDIAN_ERROR,
    MAX_NVL72_ROW_ERROR,
    MAX_NVLINK_ROW_ERROR,
    NVL72_CASES,
    Result,
    calibrate,
    calibrate_grace,
    calibrate_nvl72,
    format_table,
    grace_tray,
    median_error,
)
from gputopo.topology.catalog import load_node_type
from gputopo.topology.estimate import estimate_node
from gputopo.topology.gang import estimate_gang
from gputopo.topology.nccl import NcclSettings, NcclVersion


@pytest.fixture(scope="module")
def results() -> list[Result]:
    table = calibrate()
    print("\n" + format_table(table))
    return table


def test_every_row_is_mapped_or_set_aside_with_a_reason(results: list[Result]) -> None:
    assert [r.row for r in results] == sorted(CASES)
    for r in results:
        assert (r.predicted is None) == bool(r.set_aside)
        if r.set_aside:
            assert len(r.set_aside) > 30, f"row {r.row}: say why it is set aside"
    assert sum(r.predicted is not None for r in results) >= len(results) - 5


def test_median_absolute_error(results: list[Result]) -> None:
    assert median_error(results) <= MAX_MEDIAN_ERROR


NVLINK_ROWS = [r.row for r in calibrate() if r.nvlink_single_node and r.predicted is not None]


def test_the_nvlink_rows_are_there() -> None:
    assert NVLINK_ROWS == [1, 2, 3, 5, 6, 8, 19]


@pytest.mark.parametrize("row", NVLINK_ROWS)
def test_single_node_nvlink_rows(results: list[Result], row: int) -> None:
    r = next(r for r in results if r.row == row)
    assert r.error is not None and r.error <= MAX_NVLINK_ROW_ERROR, f"row {row}: {r.predicted} vs {r.published}"


def test_maintainers_ring_figure_for_h100() -> None:
    # Row 2 also says "~370 effective NVLink busbw ... NCCL_ALGO=RING": the ring on a 2-GPU set (no NVLS win).
    ring = estimate_node(load_node_type("hgx-h100"), [0, 1]).busbw_gbps
    assert ring == pytest.approx(370, rel=0.1)


# -- GB200 NVL72 (multi-node NVLink domains) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvl72() -> list[Result]:
    table = calibrate_nvl72()
    print("\n" + format_table(table))
    return table


def test_every_nvl72_row_is_mapped_or_set_aside_with_a_reason(nvl72: list[Result]) -> None:
    assert [r.row for r in nvl72] == sorted(NVL72_CASES)
    assert all(len(r.set_aside) > 30 for r in nvl72 if r.predicted is None)
    assert sum(r.predicted is not None for r in nvl72) == 6


@pytest.mark.parametrize(
    "row",
    [1, 2, 4, 5, 6, 7],
    ids=["one-tray-ring", "two-trays-mnnvl", "full-rack", "3-racks-x1", "3-racks-x2", "gb300-two-trays"],
)
def test_nvl72_rows(nvl72: list[Result], row: int) -> None:
    r = next(r for r in nvl72 if r.row == row)
    assert r.error is not None and r.error <= MAX_NVL72_ROW_ERROR, f"row {row}: {r.predicted} vs {r.published}"


def test_multi_node_nvlink_beats_infiniband_tenfold_order() -> None:
    # The published gap: two trays over MNNVL ~811 GB/s against ~85 over InfiniBand. The model keeps the order
    # of magnitude between one domain and two (each tray's 4 NICs of 400G).
    tray = load_node_type("gb200-tray")
    gpus = [0, 1, 2, 3]
    one = estimate_gang([(tray, gpus)] * 2, domains=["rack-a", "rack-a"]).busbw_gbps
    two = estimate_gang([(tray, gpus)] * 2, domains=["rack-a", "rack-b"]).busbw_gbps
    assert one > 4 * two


# -- Blackwell and Grace rows -------------------------------------------------------------------------------------


def test_b200_nvls_row_is_nvlink5_not_twice_hopper(results: list[Result]) -> None:
    r = next(r for r in results if r.row == 19)
    assert r.published == 830 and r.error is not None and r.error <= 0.05, r.predicted
    assert "NVLink SHARP" in r.bottleneck
    two_node = next(r for r in results if r.row == 20)
    assert two_node.predicted is None and "NVLS-tree" in two_node.set_aside


@pytest.fixture(scope="module")
def grace() -> list[Result]:
    table = calibrate_grace()
    print("\n" + format_table(table))
    return table


@pytest.mark.parametrize("case", range(len(GRACE_CASES)), ids=["all-sys-3-racks", "node-3-racks", "all-sys-6-trays"])
def test_grace_tray_matrices_reach_the_published_rows(grace: list[Result], case: int) -> None:
    r = grace[case]
    assert r.error is not None and r.error <= MAX_NVL72_ROW_ERROR, f"{GRACE_CASES[case].note}: {r.predicted}"


@pytest.mark.parametrize(
    ("version", "matrix", "expected"),
    [
        ("2.25.1", "all-sys", 4 * 50 * 0.94 * 0.6),  # no GDR through C2C: host memory at SYS
        ("2.25.1", "node", 4 * 50 * 0.94 * 0.75),
        ("2.26.2", "all-sys", 4 * 50 * 0.94 * 0.6),  # NCCL_NET_GDR_C2C exists but is off
        ("2.27.3", "all-sys", 4 * 50 * 0.94),
        ("2.27.3", "node", 4 * 50 * 0.94),
        ("2.30.7", "all-sys", 4 * 50 * 0.94),
    ],
    ids=["2.25-sys", "2.25-node", "2.26-sys", "2.27.3-sys", "2.27.3-node", "2.30-sys"],
)
def test_three_gb200_trays_per_nccl_version(version: str, matrix: str, expected: float) -> None:
    tray = grace_tray(matrix)
    settings = NcclSettings(NcclVersion.parse(version))
    value = estimate_gang([(tray, range(4))] * 3, settings=settings).busbw_gbps
    assert value == pytest.approx(expected)


@pytest.mark.parametrize(("row", "gdr"), [(21, False), (22, True)], ids=["gh200-2.24-default", "gh200-gdr-level-sys"])
def test_gh200_rows_gdr_through_c2c(results: list[Result], row: int, gdr: bool) -> None:
    # NVIDIA/nccl#1579: 79.7 GB/s without GPUDirect RDMA, 96.1 with NCCL_NET_GDR_LEVEL=SYS, over 4x 200G.
    r = next(r for r in results if r.row == row)
    assert r.error is not None and r.error <= 0.15, r.predicted
    assert ("host memory" in r.bottleneck) != gdr
