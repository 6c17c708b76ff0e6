"""The dry runs a pass asks for before preempting for a TrainingJob (``control.admission``), carried out against the
API server, and their answers kept for the next passes.

One dry run at a time per job; an answer is kept until the job changes (a new signature asks again) or is gone.
A dry run the API server could not answer (unreachable, throttled) leaves no answer: the next pass asks again, and
the job preempts nobody meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from gputopo.control.admission import AdmissionAnswer, AdmissionCheck
from gputopo.control.facts import JobKey
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError

__all__ = ["DryRuns"]

logger = logging.getLogger("gputopo.controller")


@dataclass
class DryRuns:
    answers: dict[JobKey, AdmissionAnswer] = field(default_factory=dict)
    asking: dict[JobKey, asyncio.Task[None]] = field(default_factory=dict)

    def ask(self, checks: Iterable[AdmissionCheck], client: KubeClient, answered: Callable[[], None]) -> None:
        """Start the dry runs of ``checks`` not already going out; ``answered`` hears each answer."""
        for check in checks:
            if check.key not in self.asking:
                self.asking[check.key] = asyncio.create_task(self._ask(check, client, answered))

    async def _ask(self, check: AdmissionCheck, client: KubeClient, answered: Callable[[], None]) -> None:
        try:
            refusal = await client.dry_run_pod(check.pod)
        except ApiError as error:
            logger.warning("dry run for %s/%s got no answer: %s", *check.key, error)
            return
        finally:
            self.asking.pop(check.key, None)
        self.answers[check.key] = AdmissionAnswer(check.signature, refusal)
        answered()

    def prune(self, live: Collection[JobKey]) -> None:
        """Forget the answers of jobs no longer there."""
        for key in [k for k in self.answers if k not in live]:
            del self.answers[key]

    async def close(self) -> None:
        tasks = list(self.asking.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
