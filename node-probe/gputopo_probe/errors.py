"""The probe's one error tree: NVML, sysfs, PodResources and API errors are translated into these.

``ApiError`` derives from the operator side's ``gputopo.kube.errors.ApiError`` too (a pure module, within the
probe's footprint), so one ``except`` catches an API error whichever client raised it.
"""

from __future__ import annotations

from gputopo.kube import errors as kube_errors

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


class ApiError(kube_errors.ApiError, ProbeError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, what: str, status: int, reason: str = "") -> None:
        self.what = what
        super().__init__(f"{what}: HTTP {status} {reason}".rstrip(), status, reason)


class FaultStoreError(ProbeError):
    """A fault file could not be written or read."""
