"""`gputopo topo show --node NAME` reads a NodeTopology that a fake probe published to a real API server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from gputopo.sandbox.testing import SandboxHandle

CLI = [sys.executable, "-c", "from gputopo.cli.main import app; app()"]


def _gputopo(sandbox: SandboxHandle, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def test_show_node_reads_the_cluster(sandbox: SandboxHandle) -> None:
    name = sandbox.nodes[0]

    def published() -> Any:
        if not sandbox.kubectl("get", "nodetopology", name, "--ignore-not-found", check=False).strip():
            return None
        return sandbox.get_json("nodetopology", name)

    obj = sandbox.wait_for(f"NodeTopology {name}", published, timeout=120)
    run = _gputopo(sandbox, "topo", "show", "--node", name, "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["gpu_count"] == len(obj["status"]["gpus"])
    assert doc["nic_count"] == len(obj["status"]["nics"])
    text = _gputopo(sandbox, "topo", "show", "--node", name)
    assert text.returncode == 0 and "Interconnect:" in text.stdout
    missing = _gputopo(sandbox, "topo", "show", "--node", "no-such-node", "--json")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "no NodeTopology 'no-such-node'" in missing.stderr
