"""What the operator must have before kopf starts: its ports, and a startup that either completes or ends.

An operator that cannot listen, or whose startup handler cannot finish, exits non-zero with one line on
stderr saying why: its pod restarts (and is not ready meanwhile) instead of looking alive and doing nothing.
"""

from __future__ import annotations

import socket

from gputopo.controller.metrics import Metrics
from gputopo.controller.settings import OperatorSettings
from gputopo.errors import GputopoError

__all__ = ["STARTUP_RETRIES", "STARTUP_RETRY_SECONDS", "StartupError", "claim_ports", "startup_failure"]


# An API server that cannot be reached (or answers 5xx) at startup is tried again this often, this many times;
# then the operator exits and its pod restarts, with the kubelet's backoff.
STARTUP_RETRY_SECONDS = 5.0
STARTUP_RETRIES = 12


class StartupError(GputopoError):
    """The operator cannot start; the message is the one line it exits with."""


def claim_ports(settings: OperatorSettings, metrics: Metrics) -> None:
    """Serve ``/metrics`` and make sure kopf's liveness port is free; a ``StartupError`` naming a port taken."""
    if settings.metrics_port:
        try:
            metrics.serve(settings.metrics_port)
        except OSError as error:
            raise StartupError(_taken("metrics", settings.metrics_port, error)) from None
    if settings.liveness_port:
        _check_free("liveness", settings.liveness_port)


def _check_free(what: str, port: int) -> None:
    # kopf binds it a moment later, with SO_REUSEADDR as here: this bind fails exactly when kopf's would.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            raise StartupError(_taken(what, port, error)) from None


def _taken(what: str, port: int, error: OSError) -> str:
    return f"cannot listen on the {what} port {port} (GPUTOPO_{what.upper()}_PORT): {error.strerror or error}"


def startup_failure(error: BaseException) -> StartupError | None:
    """The ``StartupError`` behind the error kopf's run ended with (kopf wraps a failed startup handler's)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, StartupError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
