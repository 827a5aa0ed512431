"""``--image`` for ``validate`` and ``check`` alike: how a node runs the training image
(runtime.py), the container checklist's probe over SSH (probe.py) and as Slurm steps
(slurm_probe.py), and whose fault a probe that did not answer is (blame.py)."""
