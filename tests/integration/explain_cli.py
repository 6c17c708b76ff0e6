"""Running ``kubectl gputopo`` (its ``kubectl-gputopo`` entry point's app) against a sandbox, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from gputopo.sandbox.testing import SandboxHandle

KUBECTL_GPUTOPO = [sys.executable, "-c", "from gputopo.cli.kubectl import app; app()"]


def kubectl_gputopo(sandbox: SandboxHandle, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    return subprocess.run([*KUBECTL_GPUTOPO, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def explained(sandbox: SandboxHandle, namespace: str, target: str) -> dict[str, Any]:
    run = kubectl_gputopo(sandbox, "explain", target, "-n", namespace, "-o", "json")
    assert run.returncode == 0, run.stderr
    found: dict[str, Any] = json.loads(run.stdout)
    return found
