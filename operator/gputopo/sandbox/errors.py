"""The sandbox's errors: each says what went wrong and what to do about it."""

__all__ = ["SandboxError"]


class SandboxError(RuntimeError):
    """The local control plane could not be started, found or changed."""
