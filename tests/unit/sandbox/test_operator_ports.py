"""Every sandbox's operator listens on ports of its own, and a sandbox is not ready while its operator is dead."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gputopo.sandbox import SandboxError, processes
from gputopo.sandbox.cluster import Sandbox


def test_each_sandboxs_operator_gets_metrics_and_liveness_ports_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Mapping[str, str]] = []

    def start(argv: Sequence[str], *, pid_file: Path, log_file: Path, env: Mapping[str, str] | None = None) -> int:
        started.append(dict(env or {}))
        return 0

    monkeypatch.setattr(processes, "start", start)
    for name in ("demo", "other"):
        Sandbox(name, root=tmp_path).start_operator()
    ports = [int(env[f"GPUTOPO_{what}_PORT"]) for env in started for what in ("METRICS", "LIVENESS")]
    assert len(set(ports)) == 4
    assert not {9090, 8080} & set(ports)  # the operator's defaults, which the first sandbox's would hold
    assert Sandbox("other", root=tmp_path)._state()["operator_ports"] == {"metrics": ports[2], "liveness": ports[3]}


def test_settings_given_override_the_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr(processes, "start", lambda argv, **kw: started.append(kw["env"]))
    Sandbox("bench", root=tmp_path).start_operator({"GPUTOPO_METRICS_PORT": "0", "GPUTOPO_LIVENESS_PORT": "0"})
    assert (started[0]["GPUTOPO_METRICS_PORT"], started[0]["GPUTOPO_LIVENESS_PORT"]) == ("0", "0")


def test_waiting_for_an_operator_that_exited_says_why(tmp_path: Path) -> None:
    box = Sandbox("dead", root=tmp_path)
    box._save_state(operator_ports={"metrics": 0, "liveness": 1})
    box.log_dir.mkdir(parents=True)
    (box.log_dir / "operator.log").write_text(
        "gputopo-operator: cannot listen on the metrics port 9090 (GPUTOPO_METRICS_PORT): Address already in use\n"
    )
    box._pid_file("operator").parent.mkdir(parents=True, exist_ok=True)
    box._pid_file("operator").write_text("999999999")  # no such process
    with pytest.raises(SandboxError, match=r"operator exited: .*metrics port 9090"):
        box.wait_for_operator(timeout=5)
