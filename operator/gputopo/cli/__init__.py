"""gputopo.cli."""
