"""The ``gputopo`` command: each sub-command lives in a module of its own and registers itself here."""

import typer

from gputopo.cli import demo, kubectl, plan, sandbox, simulate, topo

__all__ = ["app"]

app = typer.Typer(
    name="gputopo",
    help="Topology-aware placement of distributed GPU training jobs on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# kubectl registers explain, status, ui and ungate: the same commands as `kubectl gputopo`.
for module in (topo, plan, simulate, sandbox, demo, kubectl):
    module.register(app)
