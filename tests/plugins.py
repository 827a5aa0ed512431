"""The collection's Ansible plugins for tests: import one by path, or resolve them by FQCN."""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType

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
    """An ANSIBLE_COLLECTIONS_PATH on which ``nodetune.cluster`` is this checkout.

    The roles call the collection's plugins by FQCN; ``nodetune apply`` links its
    content the same way for each run.
    """
    root = Path(tempfile.mkdtemp(prefix="nodetune-collections-"))
    link = root / "ansible_collections" / "nodetune" / "cluster"
    link.parent.mkdir(parents=True)
    link.symlink_to(ROOT, target_is_directory=True)
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
