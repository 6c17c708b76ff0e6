"""gputopo.controller: the operator's I/O, its API client, watches, kopf handlers and runtime loop.

The decisions it carries out are ``gputopo.control``'s pure functions.
"""
