"""Exponential backoff for API retries, on an injected clock."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass
class Backoff:
    initial_s: float = 1.0
    max_s: float = 30.0
    failures: int = 0
    retry_at: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, now: float, *, lasting: bool = False) -> float:
        """Record a failure; returns the delay before the next try. A ``lasting`` failure (one that retrying
        soon will not fix: forbidden, invalid) waits the longest delay at once."""
        delay = self.max_s if lasting else min(self.max_s, self.initial_s * (2.0**self.failures))
        self.failures += 1
        self.retry_at = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.retry_at = 0.0
