"""Slurm: reading node state, draining and resuming the nodes a run owns."""
