"""The poll loop: a bad reading is re-read soon to confirm it, not a whole interval later."""

from __future__ import annotations

from collections.abc import Callable

from conftest import ProbeFactory
from probe_builders import hgx

from gputopo.api.nodetopology import LinkState
from gputopo_probe.runner import Member, Runner


def _runner(fake_probe: ProbeFactory, *, interval_s: float, confirm_s: float) -> tuple[Runner, Member, object]:
    probe, _, store = fake_probe(hgx(), down_after=2, up_after=2, farm=True)
    runner = Runner(interval_s, publish_workers=1, confirm_s=confirm_s)
    member = Member("node-1", probe, None)
    runner.add(member)
    return runner, member, store


def test_a_pending_bad_reading_is_confirmed_by_a_re_read(fake_probe: ProbeFactory) -> None:
    runner, member, store = _runner(fake_probe, interval_s=10.0, confirm_s=0.25)
    runner.tick()
    assert runner.confirm() == 0  # healthy hardware: nothing to re-read
    store.link("node-1", 0, 1, "down")  # type: ignore[attr-defined]
    runner.tick()
    assert member.probe.monitor.view.topology.link(0, 1).state is LinkState.UP  # one read is not a failure
    assert [m.node for m in runner.confirming()] == ["node-1"]
    assert runner.confirm() == 1
    assert member.probe.monitor.view.topology.link(0, 1).state is LinkState.DOWN
    assert runner.confirm() == 0 and member.polls == 3


def test_recovery_is_not_hurried(fake_probe: ProbeFactory) -> None:
    runner, member, store = _runner(fake_probe, interval_s=10.0, confirm_s=0.25)
    store.link("node-1", 0, 1, "down")  # type: ignore[attr-defined]
    runner.tick()
    runner.tick()
    runner.tick()
    assert member.probe.monitor.view.topology.link(0, 1).state is LinkState.DOWN
    store.link("node-1", 0, 1, "up")  # type: ignore[attr-defined]
    runner.tick()
    assert runner.confirming() == []  # Up needs up_after readings at the interval


def test_confirmation_off_at_or_above_the_interval(fake_probe: ProbeFactory) -> None:
    assert Runner(1.0, confirm_s=1.0).confirm_s == 0.0
    assert Runner(1.0, confirm_s=0.0).confirm_s == 0.0
    assert Runner(1.0, confirm_s=0.2).confirm_s == 0.2


class SteppedClock:
    """The runner's clock and its wait: a wait moves time on at once instead of sleeping."""

    def __init__(self, runner: Runner, on_wait: Callable[[float], None]) -> None:
        self.now = 0.0
        self.runner, self.on_wait = runner, on_wait

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.on_wait(self.now)
        if not self.runner.stopped:
            self.now += seconds
        return self.runner.stopped


def test_run_reports_a_failure_well_within_one_interval(fake_probe: ProbeFactory) -> None:
    probe, _, store = fake_probe(hgx(), down_after=2, up_after=2, farm=True)
    member = Member("node-1", probe, None)
    seen: dict[str, float] = {}

    def watch(now: float) -> None:
        """Between the loop's steps: break a link after the first poll, stop once it reads Down."""
        if "injected" not in seen and member.polls >= 1:
            store.link("node-1", 0, 1, "down")  # type: ignore[attr-defined]
            seen["injected"] = now
        if member.probe.monitor.view.topology.link(0, 1).state is LinkState.DOWN:
            seen["down"] = now
            runner.stop()

    runner = Runner(2.0, publish_workers=1, confirm_s=0.1)
    clock = SteppedClock(runner, watch)
    runner.clock, runner.wait = clock, clock.wait
    runner.add(member)
    try:
        runner.run()
    finally:
        runner.close()
    assert "down" in seen, "the link was never reported Down"
    took = seen["down"] - seen["injected"]
    # The first bad read comes at the next tick (within 2 s); its confirmation 0.1 s later, not 2 s later.
    assert took < 2.0 + 1.0, took
    assert member.polls <= 4
