"""Preemption off the cluster: running gangs and nominations in cluster files, priority traces, the priority-only
peer and the replay that compares them; the operator imports none of it."""
