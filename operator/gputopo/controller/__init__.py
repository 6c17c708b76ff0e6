"""gputopo.controller: the operator's I/O (kopf handlers, watches, runtime loop, writes, metrics); no decisions.

The decisions it carries out are ``gputopo.control``'s pure functions; it talks to the API server through
``gputopo.kube``. Nothing imports it but its own entry point (``gputopo-operator``).
"""
