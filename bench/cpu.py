"""CPU seconds used by each process of the sandbox, read from ``/proc``: where two shared cores went.

A side of a benchmark reads the counters before and after; the difference per component says which one the
run was waiting on (the API server, etcd, kube-scheduler, the operator, the fake probes, kwok, Kueue's manager,
the floor clients of ``bench_allocation.py`` and ``bench_gangs.py``, this process). Other sandboxes may run on
the same machine: with ``within`` (a sandbox's directory) a process counts only where its command line or its
``KUBECONFIG`` names it.
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
    ("floor client", "bench/podgroup_floor.py"),
    ("kueue", "/bin/kueue "),
)
_TICKS = os.sysconf("SC_CLK_TCK")


def _component(cmdline: str) -> str | None:
    return next((name for name, marker in COMPONENTS if marker in cmdline), None)


def _names(entry: Path, cmdline: str, within: str) -> bool:
    """Whether the process's command line or its ``KUBECONFIG`` names ``within``."""
    if within in cmdline:
        return True
    try:
        environ = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(v.startswith(b"KUBECONFIG=") and within.encode() in v for v in environ)


def cpu_seconds(proc: Path = Path("/proc"), within: str | None = None) -> Counter[str]:
    """User and system CPU seconds so far, per component (``bench`` is this process); with ``within``, only the
    processes that name it (see the module's docstring)."""
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
        if name is None or (name != "bench" and within is not None and not _names(entry, cmdline, within)):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; utime and stime are fields 14 and 15
        used[name] += (int(fields[11]) + int(fields[12])) / _TICKS
    return used
