"""`nodetune tune`: A/B-test NCCL settings on one pair and recommend nccl_config variables."""
