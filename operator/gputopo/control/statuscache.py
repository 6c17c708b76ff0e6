"""The statuses this operator wrote and has not yet seen come back through the watch.

Between a status write and its watch event, the index still holds the older status; a pass reading it
would redo the step (place the job twice, count a restart twice). Each entry is dropped once the index
has caught up with it.
"""

from __future__ import annotations

from dataclasses import replace

from gputopo.api.trainingjob import TrainingJobStatus
from gputopo.control.facts import JobFacts, JobKey

__all__ = ["StatusCache"]


def _newer(a: str, b: str) -> bool:
    """Whether resourceVersion ``a`` is newer than ``b`` (etcd revisions are integers in practice)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return a != b


class StatusCache:
    __slots__ = ("_written",)

    def __init__(self) -> None:
        self._written: dict[JobKey, tuple[str, str, TrainingJobStatus]] = {}  # key -> (uid, rv, status)

    def __len__(self) -> int:
        return len(self._written)

    def wrote(self, job: JobFacts, resource_version: str, status: TrainingJobStatus) -> None:
        self._written[job.key] = (job.uid, resource_version, status)

    def freshest(self, job: JobFacts) -> JobFacts:
        entry = self._written.get(job.key)
        if entry is None:
            return job
        uid, version, status = entry
        if uid != job.uid or not _newer(version, job.resource_version):
            del self._written[job.key]  # the watch has caught up (or it is another object now)
            return job
        return replace(job, status=status, resource_version=version)

    def forget(self, keys: set[JobKey]) -> None:
        for key in [k for k in self._written if k not in keys]:
            del self._written[key]
