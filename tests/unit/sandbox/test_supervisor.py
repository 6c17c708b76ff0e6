"""The sandbox's control-plane supervisor: components read from kwokctl's configuration, a component whose
process is gone started again with the same command, with kubelet-like back-off."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gputopo.sandbox import processes
from gputopo.sandbox.supervisor import Component, Supervisor, components, start_component


def test_components_are_read_from_kwokctls_resolved_configuration(tmp_path: Path) -> None:
    config = {
        "kind": "KwokctlConfiguration",
        "components": [
            {"name": "etcd", "binary": "/bin/etcd", "args": ["--name=node0"]},
            {"name": "kube-scheduler", "binary": "/bin/kube-scheduler", "args": ["--secure-port=1"], "workDir": "/w"},
            {"name": "kube-controller-manager", "binary": "/bin/kcm", "args": []},
        ],
    }
    (tmp_path / "kwok.yaml").write_text(yaml.safe_dump_all([config, {"kind": "Stage"}]))
    found = {c.name: c for c in components(tmp_path)}
    assert set(found) == {"kube-scheduler", "kube-controller-manager"}
    scheduler = found["kube-scheduler"]
    assert scheduler.argv == ("/bin/kube-scheduler", "--secure-port=1") and scheduler.work_dir == Path("/w")
    assert scheduler.pid_file == tmp_path / "pids" / "kube-scheduler.pid"
    assert found["kube-controller-manager"].work_dir == tmp_path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[Component]:
    (tmp_path / "pids").mkdir()
    component = Component(
        "kube-scheduler", (sys.executable, "-c", "import time; time.sleep(120)"), tmp_path,
        tmp_path / "pids" / "kube-scheduler.pid", tmp_path / "kube-scheduler.log",
    )  # fmt: skip
    start_component(component)
    yield component
    processes.stop(component.pid_file, timeout=5)


def _kill(component: Component) -> None:
    pid = int(component.pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while processes.alive(component.pid_file) and time.monotonic() < deadline:
        with_child_reaped(pid)
        time.sleep(0.05)
    assert not processes.alive(component.pid_file)


def with_child_reaped(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_component_that_exited_is_started_again_with_back_off(sleeper: Component) -> None:
    clock, lines = Clock(), []
    supervisor = Supervisor([sleeper], clock=clock, log=lines.append)
    first = int(sleeper.pid_file.read_text())
    supervisor.tick()
    assert int(sleeper.pid_file.read_text()) == first and supervisor.restarts == {"kube-scheduler": 0}

    _kill(sleeper)
    supervisor.tick()  # it just started: wait the back-off (1 s) before starting it again
    assert not processes.alive(sleeper.pid_file)
    clock.now += 1.1
    supervisor.tick()
    second = int(sleeper.pid_file.read_text())
    assert second != first and processes.alive(sleeper.pid_file)
    assert supervisor.restarts == {"kube-scheduler": 1}

    _kill(sleeper)
    supervisor.tick()
    clock.now += 1.1
    supervisor.tick()
    assert not processes.alive(sleeper.pid_file)  # the delay doubled to 2 s
    clock.now += 1.0
    supervisor.tick()
    assert processes.alive(sleeper.pid_file) and supervisor.restarts == {"kube-scheduler": 2}
    assert any("exited" in line for line in lines) and any("started again" in line for line in lines)


def test_a_component_that_ran_a_minute_is_started_again_at_once(sleeper: Component) -> None:
    clock = Clock()
    supervisor = Supervisor([sleeper], clock=clock, log=lambda _line: None)
    clock.now += 61
    supervisor.tick()
    _kill(sleeper)
    supervisor.tick()
    assert processes.alive(sleeper.pid_file) and supervisor.restarts == {"kube-scheduler": 1}
