"""The probe's one error tree: NVML, sysfs, PodResources and API errors are translated into these."""

from __future__ import annotations

__all__ = [
    "ApiError",
    "FaultStoreError",
    "GpuLostError",
    "NvmlError",
    "NvmlNotSupportedError",
    "PodResourcesError",
    "ProbeError",
    "SysfsError",
]


class ProbeError(Exception):
    """Anything the probe cannot do; the loop logs it and carries on with what it has."""


class NvmlError(ProbeError):
    """An NVML call failed; ``code`` is NVML's return code (``NVML_ERROR_*``)."""

    def __init__(self, call: str, code: int, message: str = "") -> None:
        self.call = call
        self.code = code
        super().__init__(f"{call}: NVML error {code}{': ' + message if message else ''}")


class NvmlNotSupportedError(NvmlError):
    """The GPU or driver does not support this call (or this argument): that one field degrades."""


class GpuLostError(NvmlError):
    """The GPU fell off the bus or needs a reset (NVML_ERROR_GPU_IS_LOST / RESET_REQUIRED)."""


class SysfsError(ProbeError):
    """A sysfs file that should be there could not be read or parsed."""


class PodResourcesError(ProbeError):
    """The kubelet PodResources API could not be reached or answered nonsense."""


class ApiError(ProbeError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, what: str, status: int, reason: str = "") -> None:
        self.what = what
        self.status = status
        super().__init__(f"{what}: HTTP {status} {reason}".rstrip())

    @property
    def retryable(self) -> bool:
        """Whether trying again soon may work: not reached, a conflict, throttled, a server error. A 403 or
        422 needs someone to change RBAC or the object first."""
        return self.status == 0 or self.status == 409 or self.status == 429 or self.status >= 500


class FaultStoreError(ProbeError):
    """A fault file could not be written or read."""
