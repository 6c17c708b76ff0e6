"""`kubectl gputopo status` and `gputopo ui` run against the kind cluster as a user runs them, through its
kubeconfig."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-c", "from gputopo.cli.kubectl import app; app()"]


def status_and_map(kubeconfig: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """What `status -o json` says, and the document `ui` serves its page (``/api/map``)."""
    run = subprocess.run(
        [*CLI, "status", "-o", "json", "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    ui = subprocess.Popen(
        [*CLI, "ui", "--port", "0", "--kubeconfig", str(kubeconfig)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert ui.stdout is not None
        url = ui.stdout.readline().split()[3]  # "gputopo map on http://127.0.0.1:PORT/ (read-only; ...)"
        with urllib.request.urlopen(url + "api/map", timeout=60) as response:
            drawn: dict[str, Any] = json.load(response)
    finally:
        ui.terminate()
        ui.wait(timeout=15)
    status: dict[str, Any] = json.loads(run.stdout)
    return status, drawn
