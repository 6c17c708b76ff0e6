"""gputopo.controller."""
