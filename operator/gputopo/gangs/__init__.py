"""Gangs gputopo places without owning them: PodGroups, Jobs, JobSets, LeaderWorkerSets, PyTorchJobs and pods
that name their gang, read into one model (``gputopo.gangs.model``)."""
