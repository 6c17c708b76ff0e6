"""gputopo.cli: the ``gputopo`` command; it reaches a cluster through ``gputopo.kube``, never through the operator."""
