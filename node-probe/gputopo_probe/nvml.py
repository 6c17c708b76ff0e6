"""The NVML boundary: every pynvml call goes through ``Nvml``, which turns NVML errors into probe errors.

The library is passed in (the real ``pynvml`` module or a ``gputopo_probe.fake.nvml.FakeNvml``), so the
discovery code that runs on hardware is the code the tests run.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import pynvml

from gputopo.api.nodetopology import LinkKind
from gputopo_probe.errors import GpuLostError, NvmlError, NvmlNotSupportedError

__all__ = [
    "AFFINITY_SCOPE_NODE",
    "ARCHITECTURES",
    "NVLINK_GENERATION",
    "NVML_LEVEL_KIND",
    "P2P_CAPS_INDEX_NVLINK",
    "P2P_CAPS_INDEX_READ",
    "Nvml",
    "normalise_bus_id",
    "translate",
]

T = TypeVar("T")

# pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple ``(0,)`` (a stray comma); use the literal.
P2P_CAPS_INDEX_READ: Final = 0
P2P_CAPS_INDEX_NVLINK: Final = 2
AFFINITY_SCOPE_NODE: Final = int(pynvml.NVML_AFFINITY_SCOPE_NODE)

ARCHITECTURES: Final[dict[int, str]] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    11: "Orin",
    12: "Blackwell",
    13: "Rubin",
}
ARCH_HOPPER: Final = 9

# NVML_NVLINK_VERSION_* enum value -> NVLink generation (the enum is not the generation: 2.2 is 3).
NVLINK_GENERATION: Final[dict[int, int]] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

# nvmlGpuTopologyLevel_t -> nvidia-smi's PCIe level.
NVML_LEVEL_KIND: Final[dict[int, LinkKind]] = {
    0: LinkKind.PIX,  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    10: LinkKind.PIX,
    20: LinkKind.PXB,
    30: LinkKind.PHB,
    40: LinkKind.NODE,
    50: LinkKind.SYS,
}

_LOST: Final = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})
_NOT_SUPPORTED: Final = frozenset(
    {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
)
_MESSAGES: Final[dict[int, str]] = dict(pynvml.NVMLError._errcode_to_string)


def translate(call: str, error: pynvml.NVMLError) -> NvmlError:
    """The probe's error for one pynvml error."""
    code = int(getattr(error, "value", pynvml.NVML_ERROR_UNKNOWN))
    message = _MESSAGES.get(code, "")
    if code in _LOST:
        return GpuLostError(call, code, message)
    if code in _NOT_SUPPORTED:
        return NvmlNotSupportedError(call, code, message)
    return NvmlError(call, code, message)


class Nvml:
    """A thin, typed door to an NVML library; ``lib`` is ``pynvml`` or a fake with the same functions."""

    def __init__(self, lib: Any = pynvml) -> None:
        self.lib = lib

    @property
    def backend(self) -> str:
        return str(getattr(self.lib, "BACKEND", "nvml"))

    def call(self, name: str, *args: Any) -> Any:
        """Call ``lib.<name>(*args)``; NVML errors come out as ``NvmlError`` subclasses."""
        try:
            return getattr(self.lib, name)(*args)
        except pynvml.NVMLError as error:
            raise translate(name, error) from error
        except AttributeError as error:  # an older binding without this function
            raise NvmlNotSupportedError(name, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, str(error)) from error

    def optional(self, name: str, *args: Any, default: T) -> Any | T:
        """Like ``call``, but NOT_SUPPORTED degrades to ``default``: one field lost, not the whole probe."""
        try:
            return self.call(name, *args)
        except NvmlNotSupportedError:
            return default

    def read(self, name: str, *args: Any, default: T) -> Any | T:
        """For health readings: any NVML error but a lost GPU degrades to ``default``."""
        try:
            return self.call(name, *args)
        except GpuLostError:
            raise
        except NvmlError:
            return default


def normalise_bus_id(raw: bytes | str) -> str:
    """NVML's ``00000000:07:00.0`` (bytes, upper case) -> sysfs's ``0000:07:00.0``; '' when unreadable."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    text = text.strip("\x00 ").lower()
    if not text or not text.isprintable():
        return ""
    parts = text.split(":")
    if len(parts) != 3:
        return ""
    try:
        domain = int(parts[0], 16)
        bus = int(parts[1], 16)
        device, _, function = parts[2].partition(".")
        return f"{domain:04x}:{bus:02x}:{int(device, 16):02x}.{int(function or '0', 16):x}"
    except ValueError:
        return ""
