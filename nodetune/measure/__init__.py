"""What both `check` and `validate` measure with: a check's outcome, ib_write_bw, /dev/shm,
the workers' environment and Python, --sizes, the busbw profiles, a sweep's rows and their
per-round statistics, the worker's line protocol, NCCL's log and the settings it used."""
