"""The apply verb: the inputs pass, the playbook run, and what it found about unreachable hosts."""
