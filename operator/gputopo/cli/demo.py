"""`gputopo demo`."""

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gputopo` app."""
