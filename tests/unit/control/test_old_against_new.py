"""The operator decides as it did before its decisions' memory moved into control: 600 random passes (120 seeds of
five passes each: random clusters, jobs, faults, write outcomes and times), each one's every decision digested and
compared with the digest the operator of f5ae149 recorded (see ``pass_replay``)."""

from __future__ import annotations

import json
from pathlib import Path

import pass_replay
import pytest

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "passes_f5ae149.json").read_text())


def test_the_recording_covers_at_least_500_passes() -> None:
    assert sum(len(passes) for passes in RECORDED.values()) >= 500


@pytest.mark.parametrize("seed", pass_replay.SEEDS, ids=[f"seed-{s}" for s in pass_replay.SEEDS])
def test_every_pass_decides_as_the_old_operator_did(seed: int) -> None:
    assert pass_replay.NEW
    recorded = RECORDED[str(seed)]
    for number, (old, new) in enumerate(zip(recorded, pass_replay.scenario(seed), strict=True)):
        assert new == old, f"seed {seed}: pass {number} decided otherwise than at f5ae149"
