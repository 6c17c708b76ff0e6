"""`gputopo ungate`: the documented way out when gputopo cannot lift its own gate (docs/security.md).

It removes only ``gputopo.io/placement`` from the pods it holds, in every namespace (``--all``), one namespace, or
one gang of one namespace, through ``gputopo.cli.gates``; the operator need not run. The chart's post-delete hook
runs it on ``helm uninstall`` as ``python -m gputopo.cli.ungate --all``: the command alone, which needs only the
operator image's dependencies (the whole ``gputopo`` CLI also loads the sandbox's fake probes, and NVML with them).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gputopo.cli.errors import fail
from gputopo.cli.gates import UngateReport, ungate

__all__ = ["main", "register"]


def _run(kubeconfig: str | None, namespace: str | None, gang: str | None, dry_run: bool) -> UngateReport:
    from gputopo.kube.client import KubeClient, load_configuration
    from gputopo.kube.errors import ApiError, KubeconfigError

    async def run() -> UngateReport:
        client = KubeClient(load_configuration(kubeconfig), concurrency=4)
        try:
            return await ungate(client, namespace, gang, dry_run)
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except KubeconfigError as error:
        fail(f"cannot load a kubeconfig (set $KUBECONFIG or --kubeconfig): {error}")
    except ApiError as error:
        if error.status == 0:
            fail(f"cannot reach the API server: {error}")
        fail(f"{error} ({error.status} {error.reason})".replace(" ()", ""))


def command(
    all_namespaces: Annotated[
        bool, typer.Option("--all", "-A", help="Every namespace (what `helm uninstall` runs).")
    ] = False,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Only this namespace.")] = None,
    gang: Annotated[
        str | None,
        typer.Option(
            "--gang",
            help="Only this gang of --namespace: its PodGroup, gputopo.io/gang label, Kueue pod group, JobSet, "
            "LeaderWorkerSet (<name>-<group index>), PyTorchJob or Job name, or <source>/<name> as its "
            "GangPlacement and the pods' gputopo.io/gang-id annotation name it.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list the pods that would be released.")] = False,
    kubeconfig: Annotated[
        str | None, typer.Option("--kubeconfig", help="Else in-cluster, else $KUBECONFIG or ~/.kube/config.")
    ] = None,
) -> None:
    """Lift gputopo's scheduling gate (gputopo.io/placement) from the pods it holds; other gates stay.

    For when the operator is down, crash-looping or uninstalled: the released pods are placed by kube-scheduler
    alone, not as a whole gang. Exit 1 when a pod could not be released.
    """
    if all_namespaces == bool(namespace):
        fail("name the pods to release: --all, or --namespace NAME (with --gang NAME for one gang)")
    if gang is not None and not namespace:
        fail("--gang: a gang is named within a namespace; give --namespace NAME with it, not --all")
    if gang is not None and not gang.strip():
        fail("--gang: empty; give the gang's name")
    report = _run(kubeconfig, namespace or None, gang, dry_run)
    verb = "would release" if dry_run else "released"
    for pod in report.lifted:
        typer.echo(f"{verb} {pod}")
    for pod in report.left:
        typer.echo(f"left {pod}: gone or no longer gated by gputopo")
    for pod, reason in report.failed:
        typer.echo(f"error: {pod}: {' '.join(reason.split())}", err=True)
    where = f"gang {gang} in {namespace}" if gang else (f"namespace {namespace}" if namespace else "all namespaces")
    typer.echo(f"{len(report.lifted)} pods {verb} from gputopo.io/placement ({where}); {len(report.failed)} failed")
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("ungate")(command)


def main() -> None:
    """``python -m gputopo.cli.ungate``: ``gputopo ungate`` as a program of its own."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(command)
    app(prog_name="gputopo ungate")


if __name__ == "__main__":
    main()
