"""gputopo.kube: the one Kubernetes boundary (API client, list-and-watch reflector, error tree); no decisions.

Used by the operator, the CLI and the benchmarks; it never imports ``gputopo.control`` or ``gputopo.controller``.
This ``__init__`` imports nothing, so ``gputopo.kube.errors`` loads without kubernetes or aiohttp (the probe's
footprint).
"""
