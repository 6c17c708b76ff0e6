"""The report helpers the benchmarks share (bench/reporting.py; plain data)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from reporting import cpu_table


def test_cpu_table_rows_follow_the_first_side_and_a_missing_component_is_a_dash() -> None:
    table = cpu_table(
        {
            "kube-scheduler gang": {"kube-apiserver": 4.0, "kube-scheduler": 1.5},
            "gputopo PodGroup": {"kube-apiserver": 7.25, "operator": 3.0},
        }
    )
    assert table == [
        "| component | kube-scheduler gang | gputopo PodGroup |",
        "|---|---:|---:|",
        "| kube-apiserver | 4.0 | 7.2 |",
        "| kube-scheduler | 1.5 | - |",
        "| operator | - | 3.0 |",
        "| all | 5.5 | 10.2 |",
    ]
