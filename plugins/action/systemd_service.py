"""ansible.builtin.systemd_service, with ``predict_only`` (plugins/plugin_utils/predict.py):
on a node Slurm has allocated, a service the roles would start only reports so."""

from __future__ import annotations

from ansible_collections.nodetune.cluster.plugins.plugin_utils.predict import PredictingAction


class ActionModule(PredictingAction):
    """nodetune.cluster.systemd_service: the builtin module; ``predict_only``: in check mode."""

    MODULE = "ansible.builtin.systemd_service"
