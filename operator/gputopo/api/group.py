"""The API group, version and well-known names shared by the operator, the probe and the chart."""

from typing import Final

__all__ = [
    "ANNOTATION_GANG",
    "ANNOTATION_GPUS",
    "ANNOTATION_PLACEMENT_GENERATION",
    "API_VERSION",
    "DRA_DEVICE_CLASS",
    "DRA_DRIVER",
    "FIELD_MANAGER_OPERATOR",
    "FIELD_MANAGER_PROBE",
    "GPU_RESOURCE",
    "GROUP",
    "LABEL_JOB",
    "LABEL_RANK",
    "VERSION",
]

GROUP: Final = "gputopo.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

GPU_RESOURCE: Final = "nvidia.com/gpu"
# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) and its DeviceClass of whole GPUs.
DRA_DRIVER: Final = "gpu.nvidia.com"
DRA_DEVICE_CLASS: Final = "gpu.nvidia.com"

LABEL_JOB: Final = "gputopo.io/job"
LABEL_RANK: Final = "gputopo.io/rank"
ANNOTATION_GPUS: Final = "gputopo.io/gpus"
ANNOTATION_PLACEMENT_GENERATION: Final = "gputopo.io/placement-generation"
# On a pod of a gang gputopo does not own, once steered: "<source>/<name>" of its gang (its namespace is the pod's).
# Not the plain pod contract's label gputopo.io/gang, which names a gang of bare pods.
ANNOTATION_GANG: Final = "gputopo.io/gang-id"

FIELD_MANAGER_PROBE: Final = "gputopo-probe"
FIELD_MANAGER_OPERATOR: Final = "gputopo-operator"
