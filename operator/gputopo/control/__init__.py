"""gputopo.control: the operator's decisions, as pure functions of parsed facts and a clock.

Nothing here talks to the API server, kopf or an event loop (an import-linter contract holds it so); the
I/O around it, the client, watches, handlers and the runtime loop, is ``gputopo.controller``.
"""
