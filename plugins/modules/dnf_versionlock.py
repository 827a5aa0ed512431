#!/usr/bin/python
"""Hold packages at their installed version with dnf's versionlock plugin."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dnf_versionlock
short_description: Lock packages at their installed version (dnf versionlock)
author:
  - nodetune maintainers (@nodetune)
description:
  - Reads C(dnf versionlock list) and runs C(dnf versionlock add) only for the specs
    that no lock entry matches yet (a spec may be a glob such as C(nvidia-*)).
  - Check mode reports the specs it would lock and changes nothing; C(--diff) shows
    the lock list before and after.
  - Needs the versionlock plugin on the node (C(python3-dnf-plugin-versionlock)).
options:
  name: {type: list, elements: str, required: true, description: Package names or globs.}
"""

EXAMPLES = r"""
- name: Lock the toolkit packages
  nodetune.cluster.dnf_versionlock:
    name: [nvidia-container-toolkit, nvidia-container-toolkit-base]
"""

RETURN = r"""
locks_before:
  description: Lock entries before the task.
  type: list
  elements: str
  returned: success
specs_toadd:
  description: Specs locked by this task (or that would be, in check mode).
  type: list
  elements: str
  returned: success
"""

import fnmatch
import re

# name-epoch:version-release.arch, as `dnf versionlock list` prints it ("!" = exclude).
ENTRY_RE = re.compile(r"^!?(?P<name>\S+)-(?P<epoch>\d+):(?P<version>[^-\s]+)-(?P<release>\S+)$")
SPEC_RE = re.compile(r"^[A-Za-z0-9_.+*?\[\]-]+$")


def parse_locks(text: str) -> list[tuple[str, str]]:
    """(package name, whole entry) for each lock line; other output is ignored."""
    locks = []
    for line in text.splitlines():
        match = ENTRY_RE.match(line.strip())
        if match and not line.lstrip().startswith("!"):
            locks.append((match["name"], line.strip()))
    return locks


def specs_to_add(specs: list[str], locks: list[tuple[str, str]]) -> list[str]:
    """Specs that match no locked package name."""
    names = [name for name, _entry in locks]
    return [spec for spec in specs if not any(fnmatch.fnmatchcase(name, spec) for name in names)]


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={"name": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    specs = module.params["name"]
    bad = [spec for spec in specs if not SPEC_RE.match(spec)]
    if bad:
        module.fail_json(msg=f"dnf_versionlock: not a package name or glob: {', '.join(bad)}")
    dnf = module.get_bin_path("dnf", required=True)
    rc, out, err = module.run_command([dnf, "-q", "versionlock", "list"])
    if rc != 0:
        module.fail_json(msg=f"dnf versionlock list failed (exit {rc}; is "
                             f"python3-dnf-plugin-versionlock installed?): {err.strip()}")
    locks = parse_locks(out)
    toadd = specs_to_add(specs, locks)
    result: dict[str, object] = {"changed": bool(toadd), "specs_toadd": toadd,
                                 "locks_before": [entry for _name, entry in locks]}
    if toadd:
        before = "".join(f"{entry}\n" for _name, entry in locks)
        added = "".join(f"{spec} (installed version)\n" for spec in toadd)
        result["diff"] = {"before": before, "after": before + added,
                          "before_header": "dnf versionlock list",
                          "after_header": "dnf versionlock list"}
        if not module.check_mode:
            rc, out, err = module.run_command([dnf, "-q", "-y", "versionlock", "add", "--", *toadd])
            if rc != 0:
                module.fail_json(msg=f"dnf versionlock add {' '.join(toadd)} failed (exit {rc}): "
                                     f"{err.strip() or out.strip()}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
