"""The local lab: podman containers that behave like cluster nodes, their Slurm, and faults."""
