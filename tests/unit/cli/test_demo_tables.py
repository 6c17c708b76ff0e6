"""`gputopo demo`'s tables, built from the plain objects `kubectl get -o json` returns: the TrainingJobs, and the
gangs gputopo placed without owning them (GangPlacements), with "runs on" for a running gang and "ran on" for
one whose pods all ended; when the demo counts the gangs settled; how many gangs an example declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from gputopo.cli.demo import _gang_documents, gang_row, gang_table, gangs_settled, job_table

ROOT = Path(__file__).parents[3]


def text(table: Table) -> str:
    console = Console(record=True, width=400)
    console.print(table)
    return console.export_text()


def gang(phase: str | None, *, ranks: int = 2, name: str = "llm-finetune", **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"phase": phase, **status} if phase else dict(status)
    if ranks:
        body["ranks"] = [
            {"rank": r, "pod": f"{name}-{r}", "node": f"hgx-a100-{12 + r}", "gpus": list(range(8))}
            for r in reversed(range(ranks))
        ]
        body["nodes"] = [f"hgx-a100-{12 + r}" for r in range(ranks)]
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "GangPlacement",
        "metadata": {"name": f"job-{name}", "namespace": "demo"},
        "spec": {"source": "job", "gang": name, "size": 2},
        "status": body,
    }


def test_a_running_gang_runs_on_its_ranks_nodes_in_rank_order() -> None:
    row = gang_row(gang("Running", estimatedBusBandwidthGBps=94.0, bottleneck="hgx-a100-12 network"))
    assert row == (
        "llm-finetune (2 ranks)",
        "job",
        "Running",
        "runs on hgx-a100-12, hgx-a100-13",
        "r0:0,1,2,3,4,5,6,7; r1:0,1,2,3,4,5,6,7",
        "94.0",
        "hgx-a100-12 network",
    )


def test_a_released_gang_keeps_where_it_ran() -> None:
    row = gang_row(gang("Released", estimatedBusBandwidthGBps=94.0, message="every pod of the gang has ended"))
    assert row[2:6] == ("Released", "ran on hgx-a100-12, hgx-a100-13", "r0:0,1,2,3,4,5,6,7; r1:0,1,2,3,4,5,6,7", "94.0")
    assert row[6] == ""  # the message of a gang that ran is no bottleneck


def test_a_gang_with_no_plan_says_why_and_nothing_else() -> None:
    why = "no 2 nodes with 8 free NVSwitch GPUs each"
    assert gang_row(gang("Unplaceable", ranks=0, message=why)) == (
        "llm-finetune (2 ranks)", "job", "Unplaceable", "-", "-", "-", why,
    )  # fmt: skip


def test_a_gang_without_status_reads_pending() -> None:
    bare = gang(None, ranks=0)
    del bare["status"]
    assert gang_row(bare)[2:] == ("Pending", "-", "-", "-", "")


def test_a_large_gang_shows_its_first_four_ranks_and_nodes() -> None:
    row = gang_row(gang("Running", ranks=6))
    assert row[3] == "runs on hgx-a100-12, hgx-a100-13, hgx-a100-14, hgx-a100-15 …"
    assert row[4].endswith("r3:0,1,2,3,4,5,6,7; … 2 more") and "r4:" not in row[4]


def test_the_gang_table_has_one_row_per_gang() -> None:
    rendered = text(gang_table([gang("Released", name="b"), gang("Running", name="a")]))
    assert "Gangs gputopo placed" in rendered
    assert rendered.index("a (2 ranks)") < rendered.index("b (2 ranks)")
    assert "runs on hgx-a100-12" in rendered and "ran on hgx-a100-12" in rendered


@pytest.mark.parametrize(
    ("phases", "expected", "settled"),
    [
        ([], 0, True),
        ([], 1, False),  # the gang has no record yet
        (["Running"], 1, True),
        (["Released"], 1, True),
        (["Unplaceable", "Refused"], 2, True),
        (["Planned"], 1, False),
        (["Running", None], 2, False),
    ],
)
def test_gangs_settle_in_phases_they_keep(phases: list[str | None], expected: int, settled: bool) -> None:
    gangs = [gang(p, name=f"g{i}") for i, p in enumerate(phases)]
    assert gangs_settled(gangs, expected) is settled


def test_the_job_table_shows_where_each_job_runs_or_why_it_waits() -> None:
    running = {
        "metadata": {"name": "llama-8gpu"},
        "spec": {"workers": 1, "gpusPerWorker": 8},
        "status": {
            "phase": "Running",
            "placement": {
                "workers": [{"rank": 0, "node": "dgx-a100-03", "gpus": list(range(8))}],
                "estimatedBusBandwidthGBps": 234.0,
                "bottleneck": "dgx-a100-03 intra-node",
            },
        },
    }
    waiting = {
        "metadata": {"name": "tolerant-16gpu"},
        "spec": {"workers": 2, "gpusPerWorker": 8},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "Placed", "status": "False", "message": "no leaf with 2 free nodes"}],
        },
    }
    rendered = text(job_table([waiting, running]))
    lines = [line for line in rendered.splitlines() if "llama" in line or "tolerant" in line]
    assert "llama-8gpu" in lines[0] and "dgx-a100-03" in lines[0] and "234.0" in lines[0]
    assert "tolerant-16gpu" in lines[1] and "2x8" in lines[1] and "no leaf with 2 free nodes" in lines[1]


def test_the_demo_counts_the_gangs_an_example_declares(tmp_path: Path) -> None:
    assert _gang_documents(ROOT / "examples" / "indexed-job-gang.yaml") == 1
    assert _gang_documents(ROOT / "examples" / "multi-node-4x8.yaml") == 0
    both = tmp_path / "both.yaml"
    both.write_text("kind: TrainingJob\n---\nkind: Job\n---\n")
    assert _gang_documents(both) == 1
