"""The sandbox's errors: each says what went wrong and what to do about it."""

from gputopo.errors import GputopoError

__all__ = ["SandboxError"]


class SandboxError(GputopoError, RuntimeError):
    """The local control plane could not be started, found or changed."""
