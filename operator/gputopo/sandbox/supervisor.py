"""Keep the sandbox's kube-scheduler and kube-controller-manager running, as a real control plane's kubelet or
systemd does.

Both exit when they lose their leader election lease (an API server restart longer than the renew deadline
does that) and expect a supervisor to start them again; kwokctl's binary runtime starts them once and
never again. The supervisor reads each component's command from kwokctl's resolved configuration
(``kwok.yaml``), watches the pid kwokctl recorded, and when the process is gone starts the same command,
with the same working directory and log, and writes the new pid where kwokctl keeps it (so ``kwokctl
delete cluster`` still stops it). A component that keeps dying is restarted with a growing delay (1 s
doubling to 30 s, as kubelet's crash-loop back-off), reset after it has run for a minute.

    python -m gputopo.sandbox.supervisor --cluster-dir DIR [--interval 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gputopo.sandbox import processes

__all__ = ["SUPERVISED", "Component", "Supervisor", "components", "main", "start_component"]

SUPERVISED = ("kube-controller-manager", "kube-scheduler")
_BACKOFF_START, _BACKOFF_MAX, _HEALTHY_AFTER = 1.0, 30.0, 60.0


@dataclass(frozen=True, slots=True)
class Component:
    """One control-plane process as kwokctl runs it."""

    name: str
    argv: tuple[str, ...]
    work_dir: Path
    pid_file: Path
    log_file: Path


def components(cluster_dir: Path, names: tuple[str, ...] = SUPERVISED) -> list[Component]:
    """The named components of the kwokctl cluster in ``cluster_dir`` (its ``kwok.yaml``)."""
    found: list[Component] = []
    for document in yaml.safe_load_all((cluster_dir / "kwok.yaml").read_text()):
        if not isinstance(document, dict) or document.get("kind") != "KwokctlConfiguration":
            continue
        for raw in document.get("components") or []:
            if raw.get("name") not in names:
                continue
            name = str(raw["name"])
            argv = (str(raw.get("binary") or ""), *(str(a) for a in raw.get("args") or ()))
            work_dir = Path(str(raw.get("workDir") or cluster_dir))
            found.append(Component(name, argv, work_dir, cluster_dir / "pids" / f"{name}.pid",
                                   cluster_dir / "logs" / f"{name}.log"))  # fmt: skip
    return found


def start_component(component: Component) -> int:
    """Start the component's command detached, appending to its log; record and return its pid."""
    with component.log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(component.argv),
            cwd=component.work_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    component.pid_file.write_text(str(proc.pid))
    return proc.pid


@dataclass
class _Watch:
    component: Component
    delay: float = _BACKOFF_START
    started: float = 0.0
    next_start: float = 0.0
    restarts: int = 0


@dataclass
class Supervisor:
    """Restarts supervised components whose process is gone; ``tick`` does one round (tests drive it)."""

    watched: list[Component]
    clock: Any = time.monotonic
    log: Any = print
    _watches: list[_Watch] = field(default_factory=list)

    def __post_init__(self) -> None:
        now = self.clock()
        self._watches = [_Watch(c, started=now) for c in self.watched]

    @property
    def restarts(self) -> dict[str, int]:
        return {w.component.name: w.restarts for w in self._watches}

    def tick(self) -> None:
        _reap()
        now = self.clock()
        for watch in self._watches:
            component = watch.component
            if processes.alive(component.pid_file):
                if now - watch.started >= _HEALTHY_AFTER:
                    watch.delay = _BACKOFF_START
                continue
            if watch.next_start == 0.0:
                watch.next_start = now + (watch.delay if now - watch.started < _HEALTHY_AFTER else 0.0)
                self.log(f"{_stamp()} {component.name} exited; starting it again in {watch.next_start - now:.0f} s")
            if now < watch.next_start:
                continue
            pid = start_component(component)
            watch.restarts += 1
            watch.started, watch.next_start = now, 0.0
            watch.delay = min(_BACKOFF_MAX, watch.delay * 2)
            self.log(f"{_stamp()} {component.name} started again (pid {pid}, restart {watch.restarts})")


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reap() -> None:
    """Collect the exit status of components this supervisor started, so none lingers as a zombie."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cluster-dir", type=Path, required=True, help="kwokctl's directory of the cluster")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between checks")
    args = parser.parse_args(argv)
    watched = components(args.cluster_dir)
    if not watched:
        print(f"no {' or '.join(SUPERVISED)} in {args.cluster_dir / 'kwok.yaml'}", file=sys.stderr)
        return 2
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    supervisor = Supervisor(watched, log=lambda line: print(line, flush=True))
    print(f"{_stamp()} supervising {', '.join(c.name for c in watched)}", flush=True)
    while not stopping:
        supervisor.tick()
        time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
