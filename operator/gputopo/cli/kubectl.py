"""``kubectl gputopo`` (the ``kubectl-gputopo`` entry point, found by kubectl on PATH): ``explain``, ``status`` and
``ui`` against the live cluster through the user's kubeconfig and RBAC. ``gputopo explain|status|ui`` are the same
commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gputopo.cli import ungate
from gputopo.cli.errors import CliError, fail
from gputopo.cli.live import LiveRead, read_live
from gputopo.control.explain import Explanation, cluster_status, explain_gang, explain_job
from gputopo.kube.errors import KubeError
from gputopo.placement.types import DEFAULT_TIERS, TierConfig, TierLevel

__all__ = ["COMMANDS", "app", "explain", "find", "register", "status", "tier_config"]

_KINDS_JOB = ("tj", "trainingjob", "trainingjobs", "job")
_KINDS_GANG = ("gang", "gangs", "gangplacement", "gangplacements")

Output = Annotated[str, typer.Option("-o", "--output", help="text (default) or json: one JSON document on stdout.")]
Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG).")]
TierLabels = Annotated[
    str,
    typer.Option(
        "--tier-labels",
        help="Node labels naming each node's switch per network tier, lowest first, comma-separated, as the "
        "operator's GPUTOPO_TIER_LABELS (default: fabric.topograph.run/tier-0,fabric.topograph.run/tier-1).",
    ),
]


def tier_config(labels: str) -> TierConfig:
    """The tiers the labels name (each at oversubscription 1); the operator's defaults for none."""
    names = [label.strip() for label in labels.split(",") if label.strip()]
    return TierConfig(tuple(TierLevel(n) for n in names)) if names else DEFAULT_TIERS


def _read(kubeconfig: str | None, tier_labels: str = "") -> LiveRead:
    try:
        return read_live(kubeconfig, tier_config(tier_labels))
    except KubeError as error:
        raise CliError(f"cannot read the cluster: {error}") from None


def _check_output(output: str) -> None:
    if output not in ("text", "json"):
        raise CliError(f"-o/--output: {output!r} is neither text nor json")


def find(read: LiveRead, target: str, namespace: str) -> Explanation:
    """``target`` is ``NAME``, ``tj/NAME`` or ``gang/NAME`` (a GangPlacement's name or its gang's
    ``<source>/<name>``); a bare name is a TrainingJob first, then a gang."""
    kind, _, name = target.partition("/") if "/" in target else ("", "", target)
    if kind and kind.lower() not in _KINDS_JOB + _KINDS_GANG:
        kind, name = "", target  # a gang's own <source>/<name>
    cluster = read.cluster
    if kind.lower() not in _KINDS_GANG:
        job = cluster.job(namespace, name)
        if job is not None:
            return explain_job(cluster, job)
    if kind.lower() not in _KINDS_JOB:
        gang = cluster.gang(namespace, name)
        if gang is not None:
            return explain_gang(cluster, gang)
    unread = f" (could not list: {', '.join(read.unread)})" if read.unread else ""
    raise CliError(f"no TrainingJob or gang {target!r} in namespace {namespace!r}{unread}")


def explain(
    target: Annotated[str, typer.Argument(help="NAME, tj/NAME or gang/NAME (a GangPlacement, or <source>/<name>).")],
    namespace: Annotated[str, typer.Option("-n", "--namespace", help="The gang's namespace.")] = "default",
    output: Output = "text",
    kubeconfig: Kubeconfig = None,
    tier_labels: TierLabels = "",
) -> None:
    """Why a gang is pending (reasons ranked, each domain's shortfall, what preemption would do), or where a
    running gang sits, its bus bandwidth, bottleneck, the health under it and its restarts."""
    try:
        _check_output(output)
        found = find(_read(kubeconfig, tier_labels), target, namespace)
    except CliError as error:
        fail(str(error))
    if output == "json":
        typer.echo(json.dumps(found.to_data()))
        return
    for line in found.lines():
        typer.echo(line)


def status(output: Output = "text", kubeconfig: Kubeconfig = None, tier_labels: TierLabels = "") -> None:
    """The cluster by leaf switch: free and used GPUs, gangs of 8, 16 and 64 GPUs that still fit, unhealthy
    parts, gangs per domain, and the pending gangs by reason."""
    try:
        _check_output(output)
        read = _read(kubeconfig, tier_labels)
    except CliError as error:
        fail(str(error))
    report = cluster_status(read.cluster)
    if output == "json":
        typer.echo(json.dumps({**report.to_data(), "unread": read.unread}))
        return
    for line in report.lines():
        typer.echo(line)
    for kind, why in read.unread.items():
        typer.echo(f"note: could not list {kind}: {why}")


def _ui(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free one).")] = 8642,
    address: Annotated[str, typer.Option("--address", help="Address to listen on.")] = "127.0.0.1",
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reads of the cluster.")] = 1.0,
    kubeconfig: Kubeconfig = None,
    tier_labels: TierLabels = "",
) -> None:
    """Serve the live topology map (read-only) on http://127.0.0.1:PORT/ until interrupted."""
    from gputopo.cli.ui_server import serve

    try:
        serve(address, port, interval, kubeconfig, tier_config(tier_labels))
    except KubeError as error:
        fail(f"cannot read the cluster: {error}")


# name -> command; `ungate` is the break-glass of docs/security.md.
COMMANDS: dict[str, Callable[..., Any]] = {"explain": explain, "status": status, "ui": _ui, "ungate": ungate.command}

app = typer.Typer(
    name="kubectl gputopo",
    help="gputopo on the live cluster: why a gang waits, where gangs sit, the topology map.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to a Typer app (``kubectl gputopo`` and ``gputopo``)."""
    for name, command in COMMANDS.items():
        app.command(name)(command)


register(app)
