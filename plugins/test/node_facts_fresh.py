"""Jinja test ``nodetune.cluster.node_facts_fresh``: may a role read this run's node facts?

The one definition of the rule the roles include node_facts by: facts from an earlier
run (a fact cache) never count, only a caller whose own fact gathering ran in this run
says so (``node_facts_gathered``: nodetune's inputs pass and stage plays do); and the
fact must hold what the role reads (a key, or a layout new enough).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.nodetune.cluster.plugins.plugin_utils.booleans import filter_bool
from jinja2.filters import do_int

DOCUMENTATION = r"""
name: node_facts_fresh
short_description: Whether this run gathered node_facts' fact, with what a role reads
description:
  - True where the caller says this run's fact gathering ran (I(gathered), read as the
    C(bool) filter reads it) and C(ansible_local.nodetune) is a mapping that has the key
    I(needs) and a C(schema) of at least I(schema) (read as the C(int) filter reads it, 0
    where there is none).
  - A role includes node_facts where this is false. Facts from an earlier run (a fact cache)
    never count.
positional: gathered
options:
  _input: {type: dict, required: true, description: The host's ansible_local.}
  gathered:
    type: raw
    required: true
    description: The caller's node_facts_gathered, an Ansible boolean.
  needs: {type: str, description: A key the role reads from ansible_local.nodetune.}
  schema: {type: int, description: The least fact layout (its C(schema)) the role reads.}
"""

EXAMPLES = r"""
- name: Gather the node facts where this run has none
  ansible.builtin.include_role:
    name: nodetune.cluster.node_facts
  when: >-
    not (ansible_local | default({})
         is nodetune.cluster.node_facts_fresh(node_facts_gathered | default(false), needs='pci'))
"""

RETURN = r"""
_value: {type: bool, description: True where the role may read this run's node facts.}
"""


def node_facts_fresh(local: Any, gathered: Any, needs: str | None = None,
                     schema: int | None = None) -> bool:
    """Whether ``local`` (``ansible_local``) holds node facts this run gathered, with
    the key ``needs`` and at least the layout ``schema``, where given."""
    if not filter_bool(gathered):
        return False
    facts = local.get("nodetune") if isinstance(local, Mapping) else None
    if not isinstance(facts, Mapping):
        return False
    if needs is not None and needs not in facts:
        return False
    return schema is None or do_int(facts.get("schema", 0)) >= schema


class TestModule:
    """Ansible's entry point for Jinja tests."""

    def tests(self) -> dict[str, Any]:
        return {"node_facts_fresh": node_facts_fresh}
