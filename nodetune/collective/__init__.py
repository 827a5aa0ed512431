"""An NCCL collective run on nodes over SSH: plan, launch, watch, clean up; and the worker
uploaded to them. What validate (a pair, --all) and check (the one-node all_reduce) share."""
