"""The controller's own errors: what the API server said, translated at the client boundary."""

from __future__ import annotations

__all__ = ["AlreadyExistsError", "ApiError", "ConflictError", "ControllerError", "KubeconfigError", "NotFoundError"]


class ControllerError(Exception):
    """Anything the operator cannot do, in its own words."""


class KubeconfigError(ControllerError):
    """No credentials: not running in a pod, and no kubeconfig that loads."""


class ApiError(ControllerError):
    """The API server refused a request (or could not be reached: ``status`` 0)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFoundError(ApiError):
    """The object is gone (404): for a delete, the wanted state already holds."""


class AlreadyExistsError(ApiError):
    """The object exists (409 on create): for create-if-absent, the wanted state already holds."""


class ConflictError(ApiError):
    """Someone else changed the object first (409 on update)."""
