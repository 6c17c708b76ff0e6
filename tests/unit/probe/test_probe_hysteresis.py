"""Hysteresis: Down only after N readings in a row, Up again only after M."""

from __future__ import annotations

import pytest

from gputopo.api.nodetopology import LinkState
from gputopo_probe.health.hysteresis import Hysteresis

U, G, D = LinkState.UP, LinkState.DEGRADED, LinkState.DOWN
SEVERITY = {U: 0, G: 1, D: 2}


@pytest.mark.parametrize(
    ("down_after", "up_after", "readings", "expected"),
    [
        (2, 2, [U, D, U, D, U], [U, U, U, U, U]),
        (2, 2, [U, D, D, D], [U, U, D, D]),
        (3, 1, [U, D, D, D, U], [U, U, U, D, U]),
        (1, 3, [U, D, U, U, U], [U, D, D, D, U]),
        (2, 2, [U, G, D, D], [U, U, U, D]),
        (2, 2, [U, D, D, G, G], [U, U, D, D, G]),
        (2, 2, [D, D, U, U], [D, D, D, U]),
    ],
    ids=[
        "flapping-never-goes-down",
        "down-after-two",
        "down-after-three-up-after-one",
        "down-at-once-up-after-three",
        "a-changing-bad-reading-restarts-the-count",
        "better-but-not-up",
        "first-reading-is-taken-as-it-is",
    ],
)
def test_hysteresis(down_after: int, up_after: int, readings: list[LinkState], expected: list[LinkState]) -> None:
    h: Hysteresis[str, LinkState] = Hysteresis(SEVERITY, down_after=down_after, up_after=up_after)
    assert [h.observe("link", r)[0] for r in readings] == expected


def test_force_skips_the_count() -> None:
    h: Hysteresis[str, LinkState] = Hysteresis(SEVERITY)
    h.observe("x", U)
    assert h.force("x", D) is True
    assert h.state("x") is D
    assert h.force("x", D) is False


def test_counts_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Hysteresis(SEVERITY, down_after=0)


def test_confirming_while_a_worse_reading_waits() -> None:
    h: Hysteresis[str, LinkState] = Hysteresis(SEVERITY, down_after=2, up_after=2)
    h.observe("link", U)
    assert not h.confirming
    h.observe("link", D)
    assert h.confirming  # one Down read: the next read would confirm it
    h.observe("link", D)
    assert not h.confirming and h.state("link") is D
    h.observe("link", U)
    assert not h.confirming  # a better reading waits too, but at the interval, not in a hurry
    h.observe("link", D)
    assert not h.confirming  # Down again is the state it has: nothing to confirm
