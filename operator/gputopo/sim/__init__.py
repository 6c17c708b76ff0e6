"""gputopo.sim: what the operator never runs (simulator, trace generators, peer policies, exact reference); pure.

For the CLI, the benchmarks and the tests, with the cluster and trace file loader. It stands on
``gputopo.placement``; the operator (``gputopo.control``, ``gputopo.controller``) never imports it.
"""
