"""gputopo.control: the operator's decisions and per-job memory, pure functions of facts and a clock; no I/O.

Nothing here talks to the API server, kopf or an event loop (import-linter contracts hold it so, and keep it
independent of ``gputopo.kube``); the I/O around it, the watches, handlers, runtime loop and writes, is
``gputopo.controller``.
"""
