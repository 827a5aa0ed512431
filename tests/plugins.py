"""The collection's Ansible plugins for tests: import one by path, resolve them by FQCN, or
run a module through ansible-playbook."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_plugin(relative: str) -> ModuleType:
    """Import ``ROOT/relative`` (``plugins/modules/x.py``) as a standalone module.

    Its imports of the collection's module_utils resolve to this checkout, as
    AnsiballZ bundles them for a node.
    """
    collection_loader()
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def collections_path() -> str:
    """An ANSIBLE_COLLECTIONS_PATH on which ``nodetune.cluster`` is this checkout: the
    checkout's own ``collections/`` (its ``ansible_collections/nodetune/cluster`` is a
    committed link to the repository root, as ansible.cfg uses it), so a test run leaves
    nothing in the machine's temp dir.

    The roles call the collection's plugins by FQCN; ``nodetune apply`` links its
    content the same way for each run.
    """
    root = ROOT / "collections"
    link = root / "ansible_collections" / "nodetune" / "cluster"
    if link.resolve() != ROOT.resolve():
        raise RuntimeError(f"{link} does not lead to this checkout ({ROOT})")
    return str(root)


@functools.cache
def collection_loader() -> None:
    """Ansible's collection loader, once per test process, with this checkout as nodetune.cluster.

    Modules import the collection's module_utils, and the roles' templates call its
    filters, by FQCN.
    """
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader([collections_path()])


def ansible_env(*, json_output: bool = False, **extra: str) -> dict[str, str]:
    """The environment of an ``ansible``/``ansible-playbook`` run under test.

    This checkout's roles and collection, no colour, no retry files and no warning
    about an implicit localhost; ``json_output``: the json stdout callback (for
    ad-hoc ``ansible`` too); ``extra`` last, over all of it.
    """
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_COLLECTIONS_PATH": collections_path(), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_RETRY_FILES_ENABLED": "false"}
    if json_output:
        env |= {"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    return env | extra


def run_module(workdir: Path, module: str,
               hosts: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]], *,
               must_pass: bool = False) -> dict[str, dict[str, Any]]:
    """One ansible-playbook run of one task, the collection's ``module``, on local
    inventory hosts (connection local, this Python), one fork a host.

    ``hosts``: each host's (module arguments, task keywords): its own ``check_mode``,
    ``diff`` or ``environment``, as --check and --diff would set them for a run of one
    (host variables ``nt_args`` and ``nt_KEYWORD``). ``workdir``, made here, holds the
    inventory and the play. Each host's own task result; an AssertionError with
    ansible-playbook's output where there is none, or, with ``must_pass``, where it did
    not exit 0.
    """
    keywords = sorted({key for _, task in hosts.values() for key in task})
    if any(sorted(task) != keywords for _, task in hosts.values()):
        # the play names each keyword once, for every host: a host without it would fail
        raise ValueError(f"run_module: every host must set the same task keywords {keywords}")
    hostvars = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "nt_args": args, **{f"nt_{key}": value for key, value in task.items()}}
                for name, (args, task) in hosts.items()}
    workdir.mkdir(parents=True, exist_ok=True)
    inventory = workdir / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hostvars}}))
    play = workdir / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    f"    - nodetune.cluster.{module}: \"{{{{ nt_args }}}}\"\n"
                    + "".join(f"      {key}: \"{{{{ nt_{key} }}}}\"\n" for key in keywords))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "--forks", str(len(hosts)), str(play)],
        cwd=ROOT, env=ansible_env(json_output=True), capture_output=True, text=True,
        timeout=120, check=False)
    assert proc.returncode == 0 or not must_pass, proc.stdout + proc.stderr
    try:
        results = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError(proc.stdout + proc.stderr) from None
    return {name: dict(results[name]) for name in hosts}
