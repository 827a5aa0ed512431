"""What both `check` and `validate` measure with: a check's outcome, ib_write_bw, /dev/shm."""
