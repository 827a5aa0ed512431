#!/usr/bin/python
"""Load a kernel module only when the running kernel has not got it yet."""

from __future__ import annotations

DOCUMENTATION = r"""
module: modprobe
short_description: Load a kernel module if it is neither loaded nor built in
author:
  - nodetune maintainers (@nodetune)
description:
  - Reads I(proc_modules), I(sys_module) and the running kernel's C(modules.builtin)
    and runs C(modprobe NAME) only when the module is in none of them.
  - Check mode reports the load it would do and changes nothing; C(--diff) shows the
    module list before and after.
  - Loads for now only; persistence across boots is the role's business
    (a C(/etc/modules-load.d/) file it templates).
options:
  name:
    type: str
    required: true
    description: Kernel module name, such as C(tcp_bbr).
  proc_modules: {type: path, default: /proc/modules, description: The loaded modules list.}
  sys_module: {type: path, default: /sys/module, description: Modules the kernel lists.}
  modules_root: {type: path, default: /lib/modules, description: Where kernel modules live.}
  predict_only:
    type: bool
    default: false
    description:
      - Load nothing whatever the task's mode, as check mode; the task reports no change and
        C(predicted) says whether a load was due (on a node Slurm has allocated).
"""

EXAMPLES = r"""
- name: Load the BBR congestion control module
  nodetune.cluster.modprobe:
    name: tcp_bbr
"""

RETURN = r"""
loaded_before:
  description: Whether the module was loaded or built in before the task.
  type: bool
  returned: success
predicted:
  description: With I(predict_only), whether the module would have been loaded.
  type: bool
  returned: when I(predict_only) is true
"""

import os
import re

NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


def canonical(name: str) -> str:
    """The kernel's spelling of a module name: dashes and underscores are the same."""
    return name.replace("-", "_")


def loaded_modules(proc_modules: str) -> set[str]:
    """Names in /proc/modules (first field of each line); empty when the file is absent."""
    try:
        with open(proc_modules, encoding="utf-8") as handle:
            return {canonical(line.split()[0]) for line in handle if line.strip()}
    except FileNotFoundError:
        return set()


def builtin_modules(modules_root: str, release: str) -> set[str]:
    """Names in modules.builtin (paths such as kernel/net/ipv4/tcp_cubic.ko)."""
    path = os.path.join(modules_root, release, "modules.builtin")
    try:
        with open(path, encoding="utf-8") as handle:
            return {canonical(os.path.basename(line.strip()).split(".ko")[0])
                    for line in handle if line.strip()}
    except FileNotFoundError:
        return set()


def sys_modules(sys_module: str) -> set[str]:
    """Names under /sys/module: every loaded module, and built-in ones with parameters."""
    try:
        return {canonical(entry) for entry in os.listdir(sys_module)}
    except FileNotFoundError:
        return set()


def is_present(name: str, loaded: set[str], builtin: set[str]) -> bool:
    """Whether the kernel has the module now, loaded or built in."""
    return canonical(name) in loaded or canonical(name) in builtin


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "proc_modules": {"type": "path", "default": "/proc/modules"},
            "sys_module": {"type": "path", "default": "/sys/module"},
            "modules_root": {"type": "path", "default": "/lib/modules"},
            "predict_only": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    name = module.params["name"]
    if not NAME_RE.match(name):
        module.fail_json(msg=f"modprobe: {name!r} is not a kernel module name")
    loaded = loaded_modules(module.params["proc_modules"])
    builtin = builtin_modules(module.params["modules_root"], os.uname().release)
    present = is_present(name, loaded | sys_modules(module.params["sys_module"]), builtin)
    result: dict[str, object] = {"changed": False, "name": name, "loaded_before": present}
    if module.params["predict_only"]:
        result["predicted"] = False
    if not present:
        result["changed"] = True
        result["diff"] = {
            "before": "".join(f"{m}\n" for m in sorted(loaded)),
            "after": "".join(f"{m}\n" for m in sorted(loaded | {canonical(name)})),
            "before_header": module.params["proc_modules"],
            "after_header": module.params["proc_modules"],
        }
        if module.params["predict_only"]:
            result.update(changed=False, predicted=True)
        elif not module.check_mode:
            modprobe = module.get_bin_path("modprobe", required=True,
                                           opt_dirs=["/usr/sbin", "/sbin"])
            rc, _out, err = module.run_command([modprobe, "--", name])
            if rc != 0:
                module.fail_json(msg=f"modprobe {name} failed (exit {rc}): {err.strip()}",
                                 **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
