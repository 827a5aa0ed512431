#!/usr/bin/python
"""Documentation of the deb822_repository action (ansible.builtin's module, its library, a diff)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deb822_repository
short_description: ansible.builtin.deb822_repository, with its library and --diff
author:
  - nodetune maintainers (@nodetune)
description:
  - Runs C(ansible.builtin.deb822_repository) with the same options, which reads, compares and
    writes the repository's sources file and its key in one call.
  - In diff mode it reads the sources file first and returns its change, which the builtin
    module does not report.
  - I(name) must be lower-case letters, digits and C(-), so it is the file name the module
    writes (C(/etc/apt/sources.list.d/NAME.sources), and C(/etc/apt/keyrings/NAME.asc) for an
    ASCII-armoured key or C(NAME.gpg) for a binary one).
  - Where the builtin module reports its library, python3-debian, missing, installs it with
    C(ansible.builtin.apt) (the package lists are refreshed only if they do not list it) and
    runs the module again. In check mode it installs nothing and returns C(changed) with
    C(pending), since the repository cannot be compared yet.
options:
  name: {type: str, required: true, description: The repository's name and file name.}
notes:
  - Every other option is the builtin module's.
"""

EXAMPLES = r"""
- name: Configure the CUDA repository and its key
  nodetune.cluster.deb822_repository:
    name: nodetune-cuda
    uris: ["https://example.invalid/cuda/repos/debian12/x86_64/"]
    suites: ["/"]
    signed_by: https://example.invalid/cuda/repos/debian12/x86_64/3bf863cc.pub
"""

RETURN = r"""
repo:
  description: The sources file's content (the builtin module's).
  type: str
  returned: success
dest: {description: The sources file., type: str, returned: success}
pending:
  description: Check mode only, where python3-debian is missing; the repository counts as changed.
  type: bool
  returned: when python3-debian is missing in check mode
installed:
  description: "[python3-debian] where the action installed it."
  type: list
  returned: when installed
key_filename:
  description: The key file, when signed_by was a URL or a file.
  type: str
  returned: success
"""
