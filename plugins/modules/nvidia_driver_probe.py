#!/usr/bin/python
"""What the nvidia_driver role reads beside node_facts: the loaded module, driver packages."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_probe
short_description: Read the loaded NVIDIA module and the driver packages
author:
  - nodetune maintainers (@nodetune)
description:
  - Read-only; the same in check mode.
  - The PCI devices are node_facts' (C(ansible_local.nodetune.pci)), the one hardware
    probe; this module reads none.
  - Reads I(proc_root)/driver/nvidia/version for the loaded kernel module's version and
    flavour (NVIDIA prints "Open Kernel Module" for the open modules).
  - Lists installed packages whose names match I(package_patterns) (dpkg or rpm).
options:
  proc_root: {type: path, default: /proc, description: Where procfs is.}
  package_patterns:
    type: list
    elements: str
    default: []
    description: Glob patterns of the driver's package names (dpkg-query/rpm -qa patterns).
"""

EXAMPLES = r"""
- name: Read the loaded module and the driver packages
  nodetune.cluster.nvidia_driver_probe:
    package_patterns: ["nvidia-open-kernel-dkms", "nvidia-dkms-*", "kmod-nvidia*"]
  register: probe
"""

RETURN = r"""
module_version:
  description: "The loaded nvidia module's version (empty: none loaded)."
  type: str
  returned: success
module_flavour:
  description: C(open), C(proprietary), or empty when no module is loaded.
  type: str
  returned: success
packages:
  description: "Installed packages matching the patterns: name to version."
  type: dict
  returned: success
"""

import os
import re
from typing import Any

PATTERN_RE = re.compile(r"^[A-Za-z0-9.+*?_-]+$")


def read(path: str) -> str:
    """A procfs file's text, stripped; empty when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def loaded_module(text: str) -> tuple[str, str]:
    """(version, flavour) from /proc/driver/nvidia/version's text; ("", "") when empty.

    The first line reads "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04
    Release Build ..." for the open modules and "NVRM version: NVIDIA UNIX x86_64 Kernel Module
    550.127.08 ..." for the proprietary ones.
    """
    first = text.splitlines()[0] if text else ""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+(?:\.[0-9]+)+)", first)
    if not match:
        return "", ""
    return match.group(1), "open" if "Open Kernel Module" in first else "proprietary"


def parse_listing(text: str) -> dict[str, str]:
    """Installed packages from "STATUS<TAB>NAME<TAB>VERSION" lines.

    STATUS is dpkg's abbreviation: the second letter "i" means installed, whatever the
    first (selection) letter says: "ii", and "hi" for a package on hold, as the role holds
    the driver's. rpm lines carry "ii" for every package it lists.
    """
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        status = parts[0].strip() if parts else ""
        if len(parts) == 3 and len(status) >= 2 and status[1] == "i":
            found[parts[1]] = parts[2]
    return found


def installed_packages(module: Any, patterns: list[str]) -> dict[str, str]:
    """Installed packages matching the patterns, from dpkg-query or else rpm."""
    if not patterns:
        return {}
    for argv in (["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\n"],
                 ["rpm", "-qa", "--qf", "ii\t%{NAME}\t%{VERSION}-%{RELEASE}\n"]):
        tool = module.get_bin_path(argv[0])
        if not tool:
            continue
        # Not rc: dpkg-query exits 1 when some pattern matches no package.
        _rc, out, _err = module.run_command([tool, *argv[1:], *patterns])
        return parse_listing(out)
    return {}


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={
            "proc_root": {"type": "path", "default": "/proc"},
            "package_patterns": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    patterns = module.params["package_patterns"]
    bad = [p for p in patterns if not PATTERN_RE.match(p)]
    if bad:
        module.fail_json(msg=f"nvidia_driver_probe: not package name patterns: {bad}")
    version, flavour = loaded_module(
        read(os.path.join(module.params["proc_root"], "driver", "nvidia", "version")))
    module.exit_json(changed=False, module_version=version, module_flavour=flavour,
                     packages=installed_packages(module, patterns))


if __name__ == "__main__":
    main()
