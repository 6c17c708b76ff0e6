"""The floor under gputopo's time to Running: a gang's writes made by a client that decides nothing.

``bench_allocation.py``'s sides ``replay``, ``minimal`` and ``pinned`` run no operator. A floor client
(``python bench/floor.py``, started by the benchmark through ``Replayer`` in a process of its own) watches the
TrainingJobs of the side's namespace and, for each one seen ADDED, makes the API writes for the placement the
operator chose for that job in the same run's ``devicePlugin`` side (taken from that side's statuses), with the
operator's own pod and Service bodies (``gputopo.control.pods``). Nothing is planned and nothing is read but two
watches, so what is left of the time to Running is what the API server, etcd, kube-scheduler and the simulated
kubelets need for those writes on this machine.

* ``replay``: the operator's writes, write for write: the status carrying the plan (phase Placing) before
  anything else, then the pods and the gang's Service, then the status Running once every pod is seen Running.
* ``minimal``: the least an operator that keeps gputopo's contract (a job's status shows its placement and
  phase) and leaves binding to kube-scheduler could write: the pods and the Service, and one status write,
  Running with the placement, once every pod is seen Running.
* ``pinned``: below that contract: the pods and the Service only, no status at all.

With a Kueue LocalQueue (``bench_kueue.py``'s ``minimal under Kueue``), a job's writes wait for Kueue as the
operator's do: the client first makes the job's Workload (the operator's own body,
``gputopo.control.kueue_quota.workload_manifest``) and makes the rest once Kueue admits it.

All three make at most ``GANGS_AT_ONCE`` gangs' writes at once, the operator's own default (64 requests at once,
a quarter of them for new gangs).
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import json
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gputopo.api.group import GROUP, LABEL_JOB, VERSION
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobSpec, TrainingJobStatus
from gputopo.control.kueue_quota import KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL, workload_manifest
from gputopo.control.pods import is_gang, pod_manifest, service_manifest
from gputopo.kube.client import KubeClient, load_configuration

FLOOR_SIDES = ("replay", "minimal", "pinned")
GANGS_AT_ONCE = 16
READY_WITHIN_SECONDS = 30.0
_UID = "00000000-0000-0000-0000-000000000000"  # replaced by the job's own uid when it is seen


@dataclass(frozen=True)
class GangWrites:
    """One job's writes, made ready before anything is submitted (only the owner's uid is filled in later)."""

    placing: TrainingJobStatus | None  # written before the pods (replay)
    running: TrainingJobStatus | None  # written once every pod is seen Running (replay, minimal)
    pods: tuple[dict[str, Any], ...]
    service: dict[str, Any] | None
    queue: str | None = None  # a Kueue LocalQueue: the job's Workload first, the rest once Kueue admits it
    spec: dict[str, Any] | None = None  # the job's spec, for its Workload (which names the job's uid)

    def to_json(self) -> dict[str, Any]:
        def status(value: TrainingJobStatus | None) -> dict[str, Any] | None:
            return value.model_dump(by_alias=True, mode="json") if value is not None else None

        return {
            "placing": status(self.placing),
            "running": status(self.running),
            "pods": list(self.pods),
            "service": self.service,
            "queue": self.queue,
            "spec": self.spec,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> GangWrites:
        def status(value: Any) -> TrainingJobStatus | None:
            return TrainingJobStatus.model_validate(value) if value is not None else None

        pods = tuple(body["pods"])
        return cls(
            status(body["placing"]), status(body["running"]), pods, body["service"], body.get("queue"), body.get("spec")
        )

    def workload(self, namespace: str, name: str, uid: str, generation: int) -> dict[str, Any]:
        """The job's Workload for ``queue``, as the operator makes it."""
        if self.queue is None or self.spec is None:
            raise ValueError(f"{name}: these writes wait for no queue")
        parsed = TrainingJobSpec.model_validate(self.spec)
        return workload_manifest(namespace, name, uid, generation, parsed, self.queue, 0)


def gang_writes(
    side: str, namespace: str, job: str, spec: Mapping[str, Any], status: Mapping[str, Any], queue: str | None = None
) -> GangWrites | None:
    """The writes of ``side`` for one job, from its spec and the status the operator gave it in the devicePlugin
    side (its placement), waiting for Kueue's admission in ``queue`` if one is named; None when that side never
    placed it."""
    if side not in FLOOR_SIDES:
        raise ValueError(f"not a floor side: {side!r}")
    placement_body = status.get("placement")
    if not placement_body:
        return None
    parsed = TrainingJobSpec.model_validate(spec)
    placement = PlacementStatus.model_validate(placement_body)
    pods = [pod_manifest(job, namespace, _UID, parsed, placement, worker) for worker in placement.workers]
    return GangWrites(
        placing=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement) if side == "replay" else None,
        running=TrainingJobStatus(phase=JobPhase.RUNNING, placement=placement) if side != "pinned" else None,
        pods=tuple(pods),
        service=service_manifest(job, namespace, _UID, parsed) if is_gang(parsed) else None,
        queue=queue,
        spec=dict(spec) if queue is not None else None,
    )


def _owned(body: dict[str, Any], uid: str) -> dict[str, Any]:
    owned = copy.copy(body)
    owned["metadata"] = {
        **body["metadata"],
        "ownerReferences": [{**body["metadata"]["ownerReferences"][0], "uid": uid}],
    }
    return owned


class Writes(Protocol):
    """One gang's writes as a floor client's process reads them from its file."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass
class Replayer:
    """Makes each job's writes once it is seen, from a process of its own (``python bench/floor.py`` for
    TrainingJobs' ``GangWrites``, ``script`` for another kind's), so that neither it nor the benchmark's own watches
    wait for the other's share of the interpreter, and its CPU is counted apart (component ``floor client``)."""

    kubeconfig: str
    namespace: str
    writes: Mapping[str, Writes]
    script: str = __file__
    errors: list[str] = field(default_factory=list)
    _process: subprocess.Popen[str] | None = None
    _file: Path | None = None

    def start(self) -> Replayer:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as out:
            json.dump({name: gang.to_json() for name, gang in self.writes.items()}, out)
        self._file = Path(out.name)
        argv = [sys.executable, self.script, self.kubeconfig, self.namespace, str(self._file)]
        process = self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        ready: list[str] = []
        stdout = process.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: ready.append(stdout.readline()), daemon=True)
        atexit.register(self.stop)  # never left behind, whatever becomes of the benchmark
        reader.start()
        reader.join(READY_WITHIN_SECONDS)
        if not ready or ready[0].strip() != "ready":
            self.stop()
            raise RuntimeError(f"the floor client's watches did not open within {READY_WITHIN_SECONDS} s")
        return self

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGTERM)
            try:
                out, _ = self._process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                out, _ = self._process.communicate()
            last = (out or "").strip().splitlines()[-1:] or ["[]"]
            try:
                self.errors.extend(json.loads(last[0]))
            except ValueError:
                self.errors.append(f"the floor client ended with: {last[0][:200]}")
            self._process = None
        if self._file is not None:
            self._file.unlink(missing_ok=True)
            self._file = None


Watch = Callable[[asyncio.Event], Awaitable[None]]


@dataclass
class ClientRun:
    """What a floor client's process keeps while it runs: the writes its watches spawned, and every error met
    (reported with the side's figures, never silently lost)."""

    client: KubeClient
    errors: list[str] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def events(
        self, what: str, path: str, opened: asyncio.Event, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of ``path`` from a list of it on: ``opened`` is set once the list is read."""
        listed = await self.client.get(f"list {what}", path, dict(params or {}))
        opened.set()
        version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        watched = {**(params or {}), "resourceVersion": version}
        async for event in self.client.watch(f"watch {what}", path, watched, read_timeout=600):
            yield event

    async def until(self, stop: asyncio.Event, watches: Sequence[Watch], ready: Callable[[], None]) -> list[str]:
        """Run ``watches``, say ``ready`` once each has read its list, and stop them and the writes they spawned at
        ``stop``; the errors met."""
        opened = [asyncio.Event() for _ in watches]

        async def guarded(watch: Watch, event: asyncio.Event) -> None:
            try:
                await watch(event)
            except Exception as exc:  # a broken watch leaves writes unmade: say so with the figures
                self.errors.append(f"{getattr(watch, '__name__', 'watch')}: {exc}")

        running = [asyncio.create_task(guarded(w, e)) for w, e in zip(watches, opened, strict=True)]
        await asyncio.gather(*(e.wait() for e in opened))  # Replayer.start gives up after READY_WITHIN_SECONDS
        ready()
        await stop.wait()
        for task in (*running, *self._tasks):
            task.cancel()
        await asyncio.gather(*running, *self._tasks, return_exceptions=True)
        await self.client.close()
        return self.errors


async def replay(
    kubeconfig: str, namespace: str, writes: Mapping[str, GangWrites], stop: asyncio.Event, ready: Callable[[], None]
) -> list[str]:
    """The floor client: each job's writes once its TrainingJob is seen (and, for a job in a Kueue queue, once
    Kueue admits the Workload the client made for it), until ``stop``; the errors met."""
    client = KubeClient(load_configuration(kubeconfig))
    run = ClientRun(client)
    errors, spawn = run.errors, run.spawn
    slots = asyncio.Semaphore(GANGS_AT_ONCE)
    running: dict[str, set[str]] = {}
    admitted: dict[str, tuple[str, str]] = {}  # Workload -> (job, job uid), until Kueue admits it
    jobs_path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/trainingjobs"
    workloads_path = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/namespaces/{namespace}/{WORKLOAD_PLURAL}"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"

    async def write(name: str, uid: str, gang: GangWrites) -> None:
        try:
            async with slots:
                if gang.placing is not None:
                    await client.write_status(namespace, name, gang.placing)
                creates = [client.create_pod(_owned(p, uid)) for p in gang.pods]
                if gang.service is not None:
                    creates.append(client.create_service(_owned(gang.service, uid)))
                await asyncio.gather(*creates)
        except Exception as exc:  # reported with the side's figures, never silently lost
            errors.append(f"{name}: {exc}")

    async def queue(name: str, uid: str, generation: int, gang: GangWrites) -> None:
        body = gang.workload(namespace, name, uid, generation)
        admitted[body["metadata"]["name"]] = (name, uid)
        try:
            await client.create_workload(body)
        except Exception as exc:
            errors.append(f"{name} Workload: {exc}")

    async def mark_running(name: str, status: TrainingJobStatus) -> None:
        try:
            await client.write_status(namespace, name, status)
        except Exception as exc:
            errors.append(f"{name} Running: {exc}")

    async def watch_jobs(opened: asyncio.Event) -> None:
        async for event in run.events("TrainingJobs", jobs_path, opened):
            meta = (event.get("object") or {}).get("metadata") or {}
            gang = writes.get(str(meta.get("name")))
            if event.get("type") != "ADDED" or gang is None:
                continue
            name, uid = str(meta["name"]), str(meta.get("uid", ""))
            if gang.queue is None:
                spawn(write(name, uid, gang))
            else:
                spawn(queue(name, uid, int(meta.get("generation") or 1), gang))

    async def watch_workloads(opened: asyncio.Event) -> None:
        async for event in run.events("Workloads", workloads_path, opened):
            workload = event.get("object") or {}
            conditions = (workload.get("status") or {}).get("conditions") or ()
            if not any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions):
                continue
            job = admitted.pop(str((workload.get("metadata") or {}).get("name")), None)
            if job is not None:
                spawn(write(job[0], job[1], writes[job[0]]))

    async def watch_pods(opened: asyncio.Event) -> None:
        async for event in run.events("pods", pods_path, opened, {"labelSelector": LABEL_JOB}):
            pod = event.get("object") or {}
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            job = str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB, ""))
            gang = writes.get(job)
            if gang is None or gang.running is None:
                continue
            seen = running.setdefault(job, set())
            before = len(seen)
            seen.add(str(pod["metadata"]["name"]))
            if len(seen) == len(gang.pods) > before:
                spawn(mark_running(job, gang.running))

    watches: list[Watch] = [watch_jobs]
    if any(g.running is not None for g in writes.values()):
        watches.append(watch_pods)
    if any(g.queue is not None for g in writes.values()):
        watches.append(watch_workloads)
    return await run.until(stop, watches, ready)


def serve(argv: Sequence[str], client: Callable[..., Awaitable[list[str]]], decode: Callable[[Any], Writes]) -> int:
    """A floor client's process: ``client(kubeconfig, namespace, writes, stop, ready)`` over the writes of the file
    ``argv`` names, until SIGTERM; "ready" once its watches are open, then the errors it met (a JSON list)."""
    kubeconfig, namespace, path = argv
    writes = {name: decode(gang) for name, gang in json.loads(Path(path).read_text()).items()}

    async def run() -> list[str]:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        return await client(kubeconfig, namespace, writes, stop, lambda: print("ready", flush=True))

    errors = asyncio.run(run())
    print(json.dumps(errors), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], replay, GangWrites.from_json))
