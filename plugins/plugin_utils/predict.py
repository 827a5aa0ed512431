"""An action that runs a builtin module and, where the task asks only for a prediction
(``predict_only``), runs it in check mode whatever the task's own mode.

On a node Slurm has allocated, the roles install no package and start no service:
the module reads the node and says what it would change (apt-get --simulate, dnf's
check mode, systemctl's state), changing nothing; the task reports no change and
``predicted`` says whether a real run would have changed something. A task-level
``check_mode: "{{ ansible_check_mode or busy }}"`` cannot do this: ``ansible_check_mode``
is the play's mode, so on a task that inherits check mode from a block or an included
role (molecule's verify runs roles so) the template turns check mode off.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

OPTION = "predict_only"


class PredictingAction(ActionBase):
    """Run ``MODULE`` with the task's arguments; ``predict_only``: in check mode."""

    TRANSFERS_FILES = False
    MODULE = ""
    _predict_only = False

    def module_for(self, task_vars: dict[str, Any]) -> str:
        """The module this task runs (the package action picks apt or dnf)."""
        return self.MODULE

    def unpredictable(self, done: dict[str, Any], args: dict[str, Any]) -> dict[str, Any] | None:
        """A result that replaces a check-mode failure the module cannot help (apt without
        python3-apt), or None."""
        return None

    def _update_module_args(self, module_name: str, module_args: dict[str, Any],
                            task_vars: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super()._update_module_args(module_name, module_args, task_vars, *args, **kwargs)
        if self._predict_only:
            module_args["_ansible_check_mode"] = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        raw = args.pop(OPTION, False)
        try:
            self._predict_only = boolean(raw, strict=True)
        except TypeError:
            return {**result, "failed": True,
                    "msg": f"{OPTION} {raw!r}: expected a boolean (true or false)"}
        predicting = self._predict_only and not self._task.check_mode
        module = self.module_for(task_vars)
        if not module:
            return {**result, "failed": True,
                    "msg": f"no module for this task (ansible_facts.pkg_mgr "
                           f"{task_vars.get('ansible_facts', {}).get('pkg_mgr')!r})"}
        done: dict[str, Any] = self._execute_module(module, module_args=args,
                                                    task_vars=task_vars)
        if self._task.check_mode or predicting:
            done = self.unpredictable(done, args) or done
        if predicting and not done.get("failed"):
            done = {**done, "predicted": bool(done.get("changed")), "changed": False}
        result.update(done)
        return result
