"""A training job's network, checked: rendezvous at MASTER_ADDR and a ring all-reduce over TCP, standard library only.

Each worker of a TrainingJob is one process here (one rank per node). It reads the environment the gputopo operator
injects (MASTER_ADDR, MASTER_PORT, PET_NNODES, PET_NODE_RANK; torchrun reads the same), meets the others at rank 0,
agrees on the world size and the ranks, then runs a ring all-reduce (reduce-scatter, then all-gather) once a second
for ``--seconds`` and checks every sum. It prints one JSON line per event and exits 0 when all went well, 1 when a
check failed and 2 when a peer was lost or never came.

    python allreduce.py --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CONNECT_TIMEOUT_S = 300.0  # DNS for a headless Service and the peers' pods may take a while to appear
VECTOR_CHUNKS = 4  # per rank: the vector has world * VECTOR_CHUNKS elements


class PeerLostError(Exception):
    """A peer closed its connection, or never came."""


class MismatchError(Exception):
    """The ranks disagree about the world, or a sum is wrong."""


@dataclass(frozen=True)
class Peer:
    rank: int
    address: str
    port: int


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)


class Line:
    """Newline-delimited JSON over one TCP connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("r", encoding="utf-8")

    def send(self, message: Any) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def receive(self) -> Any:
        line = self.reader.readline()
        if not line:
            raise PeerLostError("connection closed by the peer")
        return json.loads(line)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def connect(host: str, port: int, deadline: float) -> socket.socket:
    """Connect, retrying while the name does not resolve yet or nobody listens yet."""
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError as error:  # socket.gaierror included
            last = error
            time.sleep(0.5)
    raise PeerLostError(f"cannot reach {host}:{port}: {last}")


def listen(port: int = 0) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)
    return server


def accept(server: socket.socket, deadline: float) -> socket.socket:
    server.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        sock, _ = server.accept()
    except TimeoutError as error:
        raise PeerLostError("a peer never connected") from error
    sock.settimeout(None)
    return sock


def rendezvous(rank: int, world: int, master: tuple[str, int], ring_port: int, deadline: float) -> list[Peer]:
    """Every rank's ring address, agreed at rank 0; raises MismatchError when the ranks disagree."""
    if rank == 0:
        server = listen(master[1])
        try:
            own = socket.gethostbyname(socket.gethostname())
            hello = {"rank": 0, "world": world, "address": own, "port": ring_port}
            lines, hellos = [], [hello]
            for _ in range(world - 1):
                line = Line(accept(server, deadline))
                lines.append(line)
                hellos.append(line.receive())
        finally:
            server.close()
        worlds = {h["world"] for h in hellos}
        ranks = sorted(h["rank"] for h in hellos)
        verdict = "ok" if worlds == {world} and ranks == list(range(world)) else f"worlds {worlds}, ranks {ranks}"
        peers = sorted(hellos, key=lambda h: h["rank"])
        for line in lines:
            line.send({"verdict": verdict, "peers": peers})
            line.close()
    else:
        line = Line(connect(*master, deadline))
        own = line.sock.getsockname()[0]  # this pod's own address, before any NAT on the way
        line.send({"rank": rank, "world": world, "address": own, "port": ring_port})
        answer = line.receive()
        line.close()
        verdict, peers = answer["verdict"], answer["peers"]
    if verdict != "ok":
        raise MismatchError(f"rendezvous: the ranks disagree: {verdict}")
    return [Peer(p["rank"], p["address"], p["port"]) for p in peers]


class Ring:
    """Connections to the next rank and from the previous one."""

    def __init__(self, rank: int, peers: Sequence[Peer], server: socket.socket, deadline: float) -> None:
        self.rank, self.world = rank, len(peers)
        nxt = peers[(rank + 1) % self.world]
        # Even ranks connect first and odd ranks accept first, so a ring of two does not wait on itself.
        if rank % 2 == 0:
            self.next = Line(connect(nxt.address, nxt.port, deadline))
            self.prev = Line(accept(server, deadline))
        else:
            self.prev = Line(accept(server, deadline))
            self.next = Line(connect(nxt.address, nxt.port, deadline))

    def all_reduce(self, vector: list[int]) -> list[int]:
        """Sum of every rank's ``vector``, by reduce-scatter then all-gather around the ring."""
        world, rank = self.world, self.rank
        size = len(vector) // world
        chunks = [vector[i * size : (i + 1) * size] for i in range(world)]
        for step in range(world - 1):  # after this, chunk (rank + 1) % world holds the full sum
            send = (rank - step) % world
            self.next.send(chunks[send])
            receive = (rank - step - 1) % world
            chunks[receive] = [a + b for a, b in zip(chunks[receive], self.prev.receive(), strict=True)]
        for step in range(world - 1):
            send = (rank + 1 - step) % world
            self.next.send(chunks[send])
            chunks[(rank - step) % world] = self.prev.receive()
        return [x for chunk in chunks for x in chunk]

    def close(self) -> None:
        self.next.close()
        self.prev.close()


def contribution(rank: int, length: int) -> list[int]:
    return [(rank + 1) * (i + 1) for i in range(length)]


def expected_sum(world: int, length: int) -> list[int]:
    return [(i + 1) * world * (world + 1) // 2 for i in range(length)]


def visible_gpus() -> list[int]:
    raw = os.environ.get("GPUTOPO_VISIBLE_GPUS", "")
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]


def run(rank: int, world: int, master: tuple[str, int], seconds: float, timeout_s: float) -> int:
    start = time.monotonic()
    deadline = start + timeout_s
    ring_server = listen()
    peers = rendezvous(rank, world, master, ring_server.getsockname()[1], deadline)
    emit(
        "rendezvous",
        rank=rank,
        world=world,
        gpus=visible_gpus(),
        gpu_uuids=[u for u in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u],
        peers=[p.address for p in peers],
        seconds=round(time.monotonic() - start, 3),
    )
    if world == 1:
        return 0
    ring = Ring(rank, peers, ring_server, deadline)
    ring_server.close()
    length = world * VECTOR_CHUNKS
    # Every rank runs the same number of rounds (one a second), so none hangs up on a peer still reducing.
    rounds = max(1, round(seconds))
    try:
        for done in range(1, rounds + 1):
            result = ring.all_reduce(contribution(rank, length))
            if result != expected_sum(world, length):
                raise MismatchError(f"round {done}: all-reduce gave {result}, expected {expected_sum(world, length)}")
            if done == 1:
                emit("allreduce", rank=rank, world=world, ok=True, sum=result[:world])
            if done < rounds:
                time.sleep(1.0)
    finally:
        ring.close()
    emit("done", rank=rank, world=world, rounds=rounds, seconds=round(time.monotonic() - start, 3))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="all-reduce once a second for this long")
    p.add_argument("--timeout", type=float, default=CONNECT_TIMEOUT_S, help="seconds to wait for the peers")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rank = int(os.environ["PET_NODE_RANK"])
        world = int(os.environ["PET_NNODES"])
        master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    except (KeyError, ValueError) as error:
        emit("error", error=f"the operator's environment is missing or malformed: {error!r}")
        return 2
    try:
        return run(rank, world, master, args.seconds, args.timeout)
    except MismatchError as error:
        emit("error", rank=rank, error=str(error))
        return 1
    except (PeerLostError, OSError, ValueError) as error:
        emit("error", rank=rank, error=f"{type(error).__name__}: {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
