"""CPU seconds used by each process of the sandbox, read from ``/proc``: where two shared cores went.

A side of a benchmark reads the counters before and after; the difference per component says which one the
run was waiting on (the API server, etcd, kube-scheduler, the operator, the fake probes, kwok, the floor client
of ``bench_allocation.py``, this process).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

__all__ = ["COMPONENTS", "cpu_seconds"]

# A process belongs to the first component whose marker is in its command line.
COMPONENTS = (
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "/etcd"),
    ("kube-scheduler", "kube-scheduler"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("kwok", "kwok-controller"),
    ("operator", "gputopo.controller.main"),
    ("probes", "gputopo_probe"),
    ("floor client", "bench/floor.py"),
)
_TICKS = os.sysconf("SC_CLK_TCK")


def _component(cmdline: str) -> str | None:
    return next((name for name, marker in COMPONENTS if marker in cmdline), None)


def cpu_seconds(proc: Path = Path("/proc")) -> Counter[str]:
    """User and system CPU seconds so far, per component (``bench`` is this process)."""
    used: Counter[str] = Counter()
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = "bench" if int(entry.name) == me else _component(cmdline)
        if name is None:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; utime and stime are fields 14 and 15
        used[name] += (int(fields[11]) + int(fields[12])) / _TICKS
    return used
