"""The kubelet PodResources API (v1): which devices each pod holds."""
