"""What one side of a sandbox benchmark cost the cluster: the API server's writes and each component's CPU
seconds from before the side's submission until after it settled (``api_metrics.api_writes``, ``cpu.cpu_seconds``
over the sandbox's own processes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from api_metrics import api_writes
from cpu import cpu_seconds
from gputopo.sandbox import Sandbox

__all__ = ["Costs"]


def _within(box: Sandbox) -> str:
    return f"{box.dir}/"


@dataclass(frozen=True)
class Costs:
    """The counters as read at one moment. Read them again while every process of the side still runs (an
    operator or a floor client that has exited has taken its CPU seconds with it)."""

    writes: Counter[str]
    cpu: Counter[str]

    @classmethod
    def read(cls, box: Sandbox) -> Costs:
        return cls(api_writes(box), cpu_seconds(within=_within(box)))

    def since(self, box: Sandbox) -> dict[str, Any]:
        """The writes (by verb and resource, and their total) and CPU seconds (by component) since this read."""
        now = Costs.read(box)
        writes = now.writes - self.writes
        cpu = now.cpu - self.cpu
        return {
            "api_writes": dict(writes.most_common()),
            "api_writes_total": sum(writes.values()),
            "cpu_seconds": {name: round(seconds, 2) for name, seconds in cpu.most_common()},
        }
