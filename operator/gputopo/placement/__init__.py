"""gputopo.placement."""
