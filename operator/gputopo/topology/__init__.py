"""gputopo.topology."""
