"""gputopo.sandbox."""
