"""The ``predict_only`` option the collection's package and service actions share
(plugins/plugin_utils/predict.py)."""

from __future__ import annotations


class ModuleDocFragment:
    """nodetune.cluster.predict_only"""

    DOCUMENTATION = r"""
options:
  predict_only:
    type: bool
    default: false
    description:
      - Run the builtin module in check mode whatever the task's own mode (an inherited
        check mode is never turned off); the task reports no change, and C(predicted) says
        whether a real run would have changed something. The roles set it on a node Slurm
        has allocated to jobs.
notes:
  - Every other option is the builtin module's.
"""
