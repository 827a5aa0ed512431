"""``--image`` for ``validate`` and ``check`` alike: how a node runs the training image
(runtime.py), the container checklist's probe over SSH (probe.py) and as Slurm steps
(slurm_probe.py); whose fault a probe that did not answer is, is the launchers' one blame
table (nodetune.remote.executor)."""
