"""ansible.builtin.dnf, with ``predict_only`` (plugins/plugin_utils/predict.py): on a node
Slurm has allocated, the roles' RPM package tasks only predict."""

from __future__ import annotations

from ansible_collections.nodetune.cluster.plugins.plugin_utils.predict import PredictingAction


class ActionModule(PredictingAction):
    """nodetune.cluster.dnf: the builtin module; ``predict_only``: in check mode."""

    MODULE = "ansible.builtin.dnf"
