"""Two-node all_reduce validation: plan, launch over SSH, measure like nccl-tests, judge."""
