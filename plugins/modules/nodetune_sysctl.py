#!/usr/bin/python
"""Read, compare and apply kernel sysctls through /proc/sys."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nodetune_sysctl
short_description: Read, compare and apply sysctls; report keys the node lacks
author:
  - nodetune maintainers (@nodetune)
description:
  - Reads each key from I(proc_root), compares it with the wanted value
    (whitespace-insensitive, so C(4096 87380 16777216) equals the kernel's
    tab-separated form) and, with I(state=applied), writes only the keys that differ.
  - A key without a file under I(proc_root) is reported in C(missing), a key whose
    file is read-only (C(net.core.rmem_max) inside a container's network namespace on
    recent kernels) in C(read_only); either fails the task only when listed in I(required).
  - With I(congestion_control) set, checks it against
    C(net/ipv4/tcp_available_congestion_control) and the C(tcp_*.ko) modules of the
    running kernel, and fails listing the available algorithms when it is neither.
options:
  settings:
    type: dict
    required: true
    description: Wanted key/value pairs.
  required:
    type: list
    elements: str
    default: []
    description: Keys that must exist.
  congestion_control:
    type: str
    description: Wanted TCP congestion control algorithm.
  proc_root:
    type: path
    default: /proc/sys
    description: Where sysctl files live.
  modules_root:
    type: path
    default: /lib/modules
    description: Where kernel modules live.
  state:
    type: str
    choices: [probed, applied]
    default: probed
    description: C(probed) only reads and compares; C(applied) also writes what differs.
  files:
    type: list
    elements: dict
    default: []
    description:
      - With I(state=applied), files to keep as given before the live values are set - each
        C(path) with C(content) (written where it differs, with the file arguments I(mode),
        I(owner), I(group)) or C(state=absent) (removed). C(--diff) shows each change.
      - With I(state=probed), compared only (C(in_sync)).
  conf_path:
    type: path
    description:
      - A sysctl.d file of I(settings) this call keeps as one of I(files) - one C(key = value)
        line each, sorted; keys this node cannot set are written commented out, saying why.
  conf_header:
    type: str
    default: ''
    description: Comment lines that open I(conf_path).
extends_documentation_fragment: [ansible.builtin.files]
"""

EXAMPLES = r"""
- name: Compare only - which keys differ, which the node lacks
  nodetune.cluster.nodetune_sysctl:
    settings:
      net.core.rmem_max: 67108864
      net.ipv4.tcp_rmem: 4096 87380 67108864
  register: sysctl_probe

- name: Keep a sysctl.d file and set the live values that differ
  nodetune.cluster.nodetune_sysctl:
    settings:
      net.core.rmem_max: 67108864
      net.ipv4.tcp_congestion_control: bbr
    congestion_control: bbr
    required: [net.core.rmem_max]
    conf_path: /etc/sysctl.d/90-nodetune.conf
    owner: root
    group: root
    mode: "0644"
    state: applied
"""

RETURN = r"""
current:
  description: Current value of each present key (normalised).
  type: dict
  returned: success
missing:
  description: Keys with no file under I(proc_root).
  type: list
  elements: str
  returned: success
read_only:
  description: Keys whose file the kernel made read-only here.
  type: list
  elements: str
  returned: success
unsettable:
  description:
    - C(missing) + C(read_only) (not C(skipped), which would make Ansible call the task skipped).
  type: list
  elements: str
  returned: success
changes:
  description: The keys that differ, each with C(before) and C(after).
  type: dict
  returned: success
files_changed:
  description: Paths of I(files) (and I(conf_path)) written or removed.
  type: list
  elements: str
  returned: with I(state=applied) and I(files) or I(conf_path)
cc_available:
  description: Algorithms registered in the kernel now.
  type: list
  elements: str
  returned: when I(congestion_control) is set
cc_loadable:
  description: Algorithms with a loadable C(tcp_*.ko) module.
  type: list
  elements: str
  returned: when I(congestion_control) is set
cc_needs_load:
  description: Whether the wanted algorithm's module must be loaded.
  type: bool
  returned: when I(congestion_control) is set
in_sync:
  description:
    - With I(state=probed) - every settable key has its value, I(files) and I(conf_path) are as
      given and the congestion control needs no module load; C(state=applied) would change nothing.
  type: bool
  returned: when I(state=probed)
"""

import errno
import os
import re
from typing import Any

KEY_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$")
CC_FILE = "net/ipv4/tcp_available_congestion_control"


def normalize(value: object) -> str:
    """Return a sysctl value with runs of whitespace folded to one space."""
    if isinstance(value, bool):
        value = int(value)
    return " ".join(str(value).split())


def key_path(proc_root: str, key: str) -> str:
    """Map a dotted sysctl key to its file under proc_root; reject path tricks."""
    if not KEY_RE.match(key):
        raise ValueError(f"invalid sysctl key {key!r}")
    return os.path.join(proc_root, *key.split("."))


def read_current(proc_root: str, keys: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """Read keys; return (key -> normalised value, missing keys, read-only keys).

    procfs enforces its mode bits even for root, so a file without any write
    bit cannot be set in this namespace.
    """
    current: dict[str, str] = {}
    missing: list[str] = []
    read_only: list[str] = []
    for key in keys:
        path = key_path(proc_root, key)
        try:
            with open(path, encoding="utf-8") as handle:
                current[key] = normalize(handle.read())
            if not os.stat(path).st_mode & 0o222:
                read_only.append(key)
        except FileNotFoundError:
            missing.append(key)
    return current, missing, read_only


def plan(
    settings: dict[str, object], current: dict[str, str], skip: list[str]
) -> dict[str, dict[str, str]]:
    """Return {key: {before, after}} for settable keys whose value differs."""
    changes = {}
    for key, wanted in settings.items():
        if key in current and key not in skip and current[key] != normalize(wanted):
            changes[key] = {"before": current[key], "after": normalize(wanted)}
    return changes


def loadable_cc(modules_root: str, kernel: str) -> list[str]:
    """List congestion control algorithms shipped as tcp_<name>.ko* modules."""
    found = set()
    base = os.path.join(modules_root, kernel)
    for _dir, _subdirs, files in os.walk(base):
        for name in files:
            match = re.match(r"^tcp_([a-z0-9_]+)\.ko(\.[a-z]+)?$", name)
            if match:
                found.add(match.group(1))
    return sorted(found)


def write_hint(key: str, exc: OSError, proc_root: str) -> str:
    """Why a write the kernel refused was refused, where the kernel has a known reason."""
    if key == "net.ipv4.tcp_congestion_control" and exc.errno == errno.EPERM:
        # Only the initial network namespace may make a restricted algorithm the
        # default (net/ipv4/tcp_cong.c, tcp_set_default_congestion_control).
        try:
            with open(key_path(proc_root, "net.ipv4.tcp_allowed_congestion_control"),
                      encoding="utf-8") as handle:
                allowed = handle.read().split()
        except OSError:
            allowed = []
        return ("; this node is a network namespace other than the host's (a container), which "
                "may only use the algorithms in net.ipv4.tcp_allowed_congestion_control "
                f"({' '.join(allowed) or 'unreadable'}): choose one of those, or allow it on "
                "the host")
    return ""


def check_cc(wanted: str, available: list[str], loadable: list[str]) -> str | None:
    """Return an error message when wanted is neither registered nor loadable."""
    if wanted in available or wanted in loadable:
        return None
    return (
        f"net_sysctl_tcp_congestion_control: '{wanted}' is not available on this node; "
        f"available: {', '.join(available) or 'none'}; "
        f"loadable as modules: {', '.join(loadable) or 'none'}"
    )


def skipped_note(missing: list[str], read_only: list[str]) -> str:
    """What the probe tells the operator about keys this node cannot set."""
    return (
        "Skipping what this node cannot set. Not present (not in its kernel, or not per "
        f"network namespace): {', '.join(missing) or 'none'}. Read-only here (a container's "
        f"network namespace inherits them from the host): {', '.join(read_only) or 'none'}. "
        "List a key in net_sysctl_required to make this fail the run instead."
    )


def render_conf(header: str, settings: dict[str, Any], missing: list[str],
                read_only: list[str]) -> str:
    """The sysctl.d file of ``settings``: keys this node cannot set commented out, saying why."""
    lines = [header] if header else []
    lines.append("# Network tuning from the nodetune net_sysctl role; see its README for sources.")
    for key in sorted(settings):
        value = settings[key]
        if key in missing:
            lines.append(f"# {key} = {value}  (skipped: not present on this node)")
        elif key in read_only:
            lines.append(f"# {key} = {value}  (skipped: read-only on this node)")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def render(values: dict[str, str]) -> str:
    """Render key = value lines for --diff output."""
    return "".join(f"{key} = {value}\n" for key, value in sorted(values.items()))


def congestion(module: Any, params: dict[str, Any]) -> dict[str, object]:
    """The congestion control's state here; fails the task when it is neither there nor loadable."""
    with open(os.path.join(params["proc_root"], CC_FILE), encoding="utf-8") as handle:
        available = handle.read().split()
    loadable = loadable_cc(params["modules_root"], os.uname().release)
    error = check_cc(params["congestion_control"], available, loadable)
    if error:
        module.fail_json(msg=error, cc_available=available, cc_loadable=loadable)
    return {"cc_available": available, "cc_loadable": loadable,
            "cc_needs_load": params["congestion_control"] not in available}


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    # Imported here, not at the top: nodetune check imports this file by path for
    # its pure functions, without Ansible's collection loader.
    from ansible_collections.nodetune.cluster.plugins.module_utils.files import (  # pylint: disable=import-outside-toplevel
        sync_files,
    )

    module = AnsibleModule(
        argument_spec={
            "settings": {"type": "dict", "required": True},
            "required": {"type": "list", "elements": "str", "default": []},
            "congestion_control": {"type": "str"},
            "proc_root": {"type": "path", "default": "/proc/sys"},
            "modules_root": {"type": "path", "default": "/lib/modules"},
            "state": {"type": "str", "choices": ["probed", "applied"], "default": "probed"},
            "files": {"type": "list", "elements": "dict", "default": []},
            "conf_path": {"type": "path"},
            "conf_header": {"type": "str", "default": ""},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    settings = dict(params["settings"])
    result: dict[str, object] = {"changed": False}
    try:
        current, missing, read_only = read_current(params["proc_root"], list(settings))
    except ValueError as exc:
        module.fail_json(msg=f"net_sysctl_settings: {exc}")
    skipped = missing + read_only
    required_skipped = [key for key in params["required"] if key in skipped]
    if required_skipped:
        module.fail_json(
            msg=(
                f"net_sysctl_required: key(s) {', '.join(required_skipped)} "
                "cannot be set on this node "
                "(absent from its kernel or network namespace, or read-only there)"
            ),
            missing=missing,
            read_only=read_only,
        )
    result.update(current=current, missing=missing, read_only=read_only, unsettable=skipped)
    if skipped and params["state"] == "probed":
        module.warn(skipped_note(missing, read_only))

    if params["congestion_control"]:
        result.update(congestion(module, params))

    changes = plan(settings, current, skipped)
    result["changes"] = changes
    files = list(params["files"])
    if params["conf_path"]:
        files.insert(0, {"path": params["conf_path"], "content": render_conf(
            params["conf_header"], settings, missing, read_only)})
    diffs: list[dict[str, Any]] = []
    if params["state"] == "probed":
        # Compared only: a probe never writes, whatever the mode.
        module.check_mode = True
        stale, _diffs = sync_files(module, files)
        result["in_sync"] = not changes and not stale and not result.get("cc_needs_load")
    if params["state"] == "applied" and files:
        files_changed, diffs = sync_files(module, files)
        result["files_changed"] = files_changed
        if files_changed:
            result["changed"] = True
            result["diff"] = diffs
    if params["state"] == "applied" and changes:
        result["changed"] = True
        live = {
            "before": render({k: v["before"] for k, v in changes.items()}),
            "after": render({k: v["after"] for k, v in changes.items()}),
            "before_header": params["proc_root"],
            "after_header": params["proc_root"],
        }
        result["diff"] = [*diffs, live] if diffs else live
        if not module.check_mode:
            for key, change in changes.items():
                try:
                    with open(key_path(params["proc_root"], key), "w", encoding="utf-8") as handle:
                        handle.write(change["after"])
                except OSError as exc:
                    module.fail_json(
                        msg=f"net_sysctl: could not set {key} = {change['after']}: {exc}"
                        + write_hint(key, exc, params["proc_root"]),
                        **result,
                    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
