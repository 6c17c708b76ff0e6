"""gputopo.sim: what the operator never runs (the trace simulator, trace generators, peer policies, exact
reference solvers and the cluster-file loader), for the CLI, the benchmarks and the tests.

It stands on ``gputopo.placement``; the operator (``gputopo.control``, ``gputopo.controller``) never imports it.
"""
