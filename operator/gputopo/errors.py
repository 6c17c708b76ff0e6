"""The root of the operator side's error tree: every gputopo exception derives from ``GputopoError``.

It imports nothing, so every package (the probe's footprint included) may derive from it.
"""

from __future__ import annotations

__all__ = ["GputopoError"]


class GputopoError(Exception):
    """Anything gputopo cannot do, in its own words; the subclasses say what and where."""
