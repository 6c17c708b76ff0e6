"""The Kubernetes boundary's errors: what the API server said, translated at the client.

Pure (no kubernetes, no aiohttp), so the probe's lean client shares ``ApiError``.
"""

from __future__ import annotations

from gputopo.errors import GputopoError

__all__ = ["AlreadyExistsError", "ApiError", "ConflictError", "KubeError", "KubeconfigError", "NotFoundError"]


class KubeError(GputopoError):
    """Anything the client cannot do with the API server."""


class KubeconfigError(KubeError):
    """No credentials: not running in a pod, and no kubeconfig that loads."""


class ApiError(KubeError):
    """The API server refused a request (or could not be reached: ``status`` 0)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def retryable(self) -> bool:
        """Whether trying again soon may work: not reached, a conflict, throttled, a server error. A 403 or
        422 needs someone to change RBAC or the object first."""
        return self.status == 0 or self.status == 409 or self.status == 429 or self.status >= 500


class NotFoundError(ApiError):
    """The object is gone (404): for a delete, the wanted state already holds."""


class AlreadyExistsError(ApiError):
    """The object exists (409 on create): for create-if-absent, the wanted state already holds."""


class ConflictError(ApiError):
    """Someone else changed the object first (409 on update)."""
