"""Hysteresis: a state changes only after the new reading holds for N (worse) or M (better) polls in a row."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Hysteresis"]

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Hashable)


@dataclass
class _Track(Generic[S]):
    state: S
    candidate: S
    streak: int = 0


class Hysteresis(Generic[K, S]):
    """``severity`` orders states (0 = healthy); a worse state needs ``down_after`` readings, a better one
    ``up_after``. The first reading of a key is taken as it is: there is no earlier state to protect."""

    def __init__(self, severity: dict[S, int], *, down_after: int = 2, up_after: int = 2) -> None:
        if down_after < 1 or up_after < 1:
            raise ValueError("down_after and up_after must be at least 1")
        self.severity = severity
        self.down_after = down_after
        self.up_after = up_after
        self._tracks: dict[K, _Track[S]] = {}

    @property
    def settled(self) -> bool:
        """No reading is waiting to be confirmed: another poll of unchanged hardware changes nothing."""
        return all(t.streak == 0 for t in self._tracks.values())

    @property
    def confirming(self) -> bool:
        """A worse reading has been seen and waits for the readings that would confirm it."""
        return any(t.streak > 0 and self.severity[t.candidate] > self.severity[t.state] for t in self._tracks.values())

    def state(self, key: K) -> S | None:
        track = self._tracks.get(key)
        return track.state if track else None

    def force(self, key: K, state: S) -> bool:
        """Set a state at once (an XID is an event, not a reading to debounce); True when it changed."""
        track = self._tracks.get(key)
        if track is None:
            self._tracks[key] = _Track(state, state)
            return False
        changed = track.state != state
        track.state, track.candidate, track.streak = state, state, 0
        return changed

    def observe(self, key: K, reading: S) -> tuple[S, bool]:
        """Feed one reading; returns the (possibly unchanged) state and whether it changed now."""
        track = self._tracks.get(key)
        if track is None:
            self._tracks[key] = _Track(reading, reading)
            return reading, False
        if reading == track.state:
            track.candidate, track.streak = reading, 0
            return track.state, False
        if reading == track.candidate:
            track.streak += 1
        else:
            track.candidate, track.streak = reading, 1
        worse = self.severity[reading] > self.severity[track.state]
        if track.streak >= (self.down_after if worse else self.up_after):
            track.state, track.streak = reading, 0
            return reading, True
        return track.state, False
