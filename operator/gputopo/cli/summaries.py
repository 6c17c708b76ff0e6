"""How the simulate commands show their per-policy summaries: a plot when asked, JSON or one line per policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

__all__ = ["Summaries", "show_summaries"]

Summaries = dict[str, dict[str, Any]]


def show_summaries(
    summaries: Summaries,
    *,
    plot: tuple[Callable[[Summaries, Path], None], Path | None],
    document: dict[str, Any] | None,
    line: Callable[[str, dict[str, Any]], str],
) -> None:
    """Plot the summaries where a path is given; print ``document`` as JSON when there is one, else a line each."""
    plotter, path = plot
    if path:
        plotter(summaries, path)
    if document is not None:
        typer.echo(json.dumps(document))
        return
    for name, summary in summaries.items():
        typer.echo(line(name, summary))
