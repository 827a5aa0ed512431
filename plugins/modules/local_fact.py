#!/usr/bin/python
"""Install an executable local fact and gather the local facts, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: local_fact
short_description: Install a local fact script and gather ansible_local in one call
author:
  - nodetune maintainers (@nodetune)
description:
  - Creates I(dir) when missing, writes I(content) to I(dir)/I(name) when the file
    differs from it (content, mode, owner, group), then gathers every local fact in
    I(dir) exactly as C(setup) with C(gather_subset=local) and C(fact_path=dir) does.
  - Check mode predicts the directory, file and attribute changes (C(--diff) shows
    them) and gathers what is on the node now, with this fact run from a temporary
    copy of I(content) where the file is not there yet or differs, so later tasks see
    the facts the installed script would give.
options:
  dir: {type: path, required: true, description: Local facts directory (C(fact_path)).}
  name:
    type: str
    required: true
    description: File name of the fact, such as C(x.fact).
  content: {type: str, required: true, description: The fact script's text.}
extends_documentation_fragment: [ansible.builtin.files]
notes:
  - I(mode), I(owner), I(group) (the file arguments) apply to the fact and to a
    directory this module creates.
"""

EXAMPLES = r"""
- name: Install and gather the nodetune local fact
  nodetune.cluster.local_fact:
    dir: /etc/ansible/facts.d
    name: nodetune.fact
    content: "{{ lookup('ansible.builtin.file', 'nodetune.fact') }}"
"""

RETURN = r"""
ansible_facts:
  description: C(ansible_local) as setup gathers it from I(dir).
  type: dict
  returned: success
"""

import os
import tempfile
from typing import Any


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomic(module: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ansible_tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def gather_content(module: Any, name: str, data: bytes) -> dict[str, Any]:
    """The fact ``data`` would give once installed as ``name``, run from a temporary copy."""
    tmp = tempfile.mkdtemp(prefix="nodetune-fact-", dir=module.tmpdir)
    path = os.path.join(tmp, name)
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o700)
    return dict(gather(module, tmp)["ansible_local"])


def gather(module: Any, fact_path: str) -> dict[str, Any]:
    """ansible_local from ``fact_path``, by the collector setup itself uses."""
    # pylint: disable-next=import-outside-toplevel
    from ansible.module_utils.facts.system.local import LocalFactCollector

    module.params["fact_path"] = fact_path
    facts = LocalFactCollector().collect(module=module)
    return {"ansible_local": facts.get("local", {})}


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "content": {"type": "str", "required": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    name = params["name"]
    if not name or "/" in name or name in (".", ".."):
        module.fail_json(msg=f"local_fact: name {name!r} must be a file name")
    fact_dir = params["dir"]
    path = os.path.join(fact_dir, name)
    data = params["content"].encode("utf-8")
    changed = False
    diffs: list[dict[str, Any]] = []

    if not os.path.isdir(fact_dir):
        if os.path.lexists(fact_dir):
            module.fail_json(msg=f"local_fact: {fact_dir} exists and is not a directory")
        changed = True
        diffs.append({"before": {"path": fact_dir, "state": "absent"},
                      "after": {"path": fact_dir, "state": "directory"}})
        if not module.check_mode:
            os.makedirs(fact_dir)
            module.set_fs_attributes_if_different(
                module.load_file_common_arguments(params, path=fact_dir), False)

    before = read_bytes(path)
    if before != data:
        changed = True
        diffs.append({"before": "" if before is None else before.decode("utf-8", "replace"),
                      "after": params["content"], "before_header": path, "after_header": path})
        if not module.check_mode:
            write_atomic(module, path, data)
    # In check mode a file not written yet has no attributes to compare.
    if os.path.lexists(path):
        attr_diff: dict[str, Any] = {"before": {"path": path}, "after": {"path": path}}
        changed = module.set_fs_attributes_if_different(
            module.load_file_common_arguments(params, path=path), changed, attr_diff)
        if attr_diff["before"] != {"path": path}:
            diffs.append(attr_diff)

    facts = gather(module, fact_dir) if os.path.isdir(fact_dir) else {"ansible_local": {}}
    if module.check_mode and before != data:
        facts["ansible_local"].update(gather_content(module, name, data))
    result: dict[str, Any] = {"changed": changed, "path": path, "ansible_facts": facts}
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
