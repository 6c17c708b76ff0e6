"""The gputopo node probe: discovers a GPU node's interconnect, watches its health and publishes it."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("gputopo")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0"
