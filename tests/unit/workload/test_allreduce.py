"""The e2e workload (images/allreduce): ranks rendezvous at rank 0 and all-reduce around a ring, as real processes
on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "images" / "allreduce" / "allreduce.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(rank: int, world: int, port: int, *args: str, gpus: str = "") -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": str(port),
        "PET_NNODES": str(world),
        "PET_NODE_RANK": str(rank),
        "GPUTOPO_VISIBLE_GPUS": gpus,
    }
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--timeout", "20", *args], env=env, stdout=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, list[dict[str, Any]]]:
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("world", [1, 2, 3, 5], ids=lambda w: f"world-{w}")
def test_ranks_rendezvous_and_all_reduce(world: int) -> None:
    port = free_port()
    procs = [start(rank, world, port, "--seconds", "2", gpus=f"{2 * rank},{2 * rank + 1}") for rank in range(world)]
    results = [finish(p) for p in procs]
    for rank, (code, events) in enumerate(results):
        assert code == 0, events
        meet = next(e for e in events if e["event"] == "rendezvous")
        assert (meet["rank"], meet["world"], meet["gpus"]) == (rank, world, [2 * rank, 2 * rank + 1])
        assert len(meet["peers"]) == world
        if world > 1:
            reduced = next(e for e in events if e["event"] == "allreduce")
            assert reduced["ok"] and reduced["sum"] == [(i + 1) * world * (world + 1) // 2 for i in range(world)]
            done = next(e for e in events if e["event"] == "done")
            assert done["rounds"] >= 2


def test_ranks_that_disagree_on_the_world_fail() -> None:
    port = free_port()
    master = start(0, 2, port)
    other = start(1, 3, port)
    assert finish(master)[0] == 1
    code, events = finish(other)
    assert code == 1 and "disagree" in events[-1]["error"]


def test_a_missing_peer_is_reported_lost() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--timeout", "1"],
        env={
            **os.environ,
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": str(port),
            "PET_NNODES": "2",
            "PET_NODE_RANK": "0",
        },
        stdout=subprocess.PIPE,
        text=True,
    )
    code, events = finish(proc)
    assert code == 2 and "never connected" in events[-1]["error"]


def test_without_the_operators_environment_it_says_so() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "PET_NNODES", "PET_NODE_RANK")}
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "environment" in json.loads(proc.stdout)["error"]
