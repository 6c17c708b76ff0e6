"""``gputopo-operator``: runs the kopf operator with peering, a liveness endpoint and Prometheus metrics.

A port it cannot have, or a startup it cannot finish, ends it with one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
from collections.abc import Sequence
from typing import Any, cast

import kopf

from gputopo.control.quarantine import Quarantine
from gputopo.controller.handlers import register
from gputopo.controller.metrics import Metrics
from gputopo.controller.readiness import Readiness
from gputopo.controller.runtime import Runtime
from gputopo.controller.settings import OperatorSettings
from gputopo.controller.startup import claim_ports, startup_failure
from gputopo.kube.client import KubeClient, load_configuration
from gputopo.kube.errors import ApiError, KubeconfigError
from gputopo.placement import place

__all__ = ["main", "settings_from_args"]

logger = logging.getLogger("gputopo.controller")


def settings_from_args(argv: Sequence[str] | None = None) -> OperatorSettings:
    parser = argparse.ArgumentParser(prog="gputopo-operator", description=__doc__)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--standalone", action="store_true", default=None, help="no peering (one replica)")
    parser.add_argument("--priority", type=int, help="peering priority (default: random)")
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    if args.namespace:
        overrides["namespaces"] = list(args.namespace)
    if args.all_namespaces:
        overrides["namespaces"] = []
    if args.standalone:
        overrides["standalone"] = True
    if args.priority is not None:
        overrides["priority"] = args.priority
    return OperatorSettings(**overrides)  # type: ignore[arg-type]


def _kopf_log_format(name: str) -> kopf.LogFormat:
    return {"json": kopf.LogFormat.JSON, "plain": kopf.LogFormat.PLAIN}.get(name, kopf.LogFormat.FULL)


async def _ensure_peering(settings: OperatorSettings) -> None:
    client = KubeClient(load_configuration(), concurrency=4)
    try:
        await client.ensure_peering(settings.peering_name, settings.watched_namespaces)
    except ApiError as exc:
        logger.warning("could not create the peering object (are crds/kopf-peering.yaml installed?): %s", exc)
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> None:
    settings = settings_from_args(argv)
    metrics = Metrics(readiness=Readiness(settings.readiness_failed_passes))
    try:
        claim_ports(settings, metrics)
        _run(settings, metrics)
    except KubeconfigError as error:
        sys.exit(f"gputopo-operator: cannot load the API server's credentials: {error}")
    except Exception as error:
        failure = startup_failure(error)
        if failure is None:
            raise
        sys.exit(f"gputopo-operator: {failure}")


def _run(settings: OperatorSettings, metrics: Metrics) -> None:
    kopf.configure(log_format=_kopf_log_format(settings.log_format), verbose=False)
    logging.getLogger("gputopo").setLevel(logging.INFO)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # per-handler chatter; decisions are Events
    if not settings.standalone:
        asyncio.run(_ensure_peering(settings))
    priority = settings.priority if settings.priority is not None else random.SystemRandom().randint(1, 10**6)

    def make_runtime() -> Runtime:
        return Runtime(
            settings=settings,
            client=KubeClient(load_configuration(), settings.api_concurrency),
            place=place,
            quarantine=Quarantine(settings.quarantine_seconds),
            metrics=metrics,
        )

    registry = kopf.OperatorRegistry()
    register(registry, settings, make_runtime)
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    kopf.run(
        registry=registry,
        clusterwide=settings.clusterwide,
        namespaces=settings.watched_namespaces,
        standalone=settings.standalone,
        peering_name=None if settings.standalone else settings.peering_name,
        priority=priority,
        identity=cast(Any, settings.identity),  # kopf's Identity is a NewType of str
        liveness_endpoint=liveness,
    )


if __name__ == "__main__":
    main()
