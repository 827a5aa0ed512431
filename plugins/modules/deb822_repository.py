#!/usr/bin/python
"""Documentation of the deb822_repository action (ansible.builtin's module with a diff)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deb822_repository
short_description: ansible.builtin.deb822_repository, with --diff of the sources file
description:
  - Runs C(ansible.builtin.deb822_repository) with the same options, which reads, compares and
    writes the repository's sources file and its key in one call.
  - In diff mode it reads the sources file first and returns its change, which the builtin
    module does not report.
  - I(name) must be lower-case letters, digits and C(-), so it is the file name the module
    writes (C(/etc/apt/sources.list.d/NAME.sources), C(/etc/apt/keyrings/NAME.asc)).
  - Needs python3-debian on the node, as the builtin module does.
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
key_filename:
  description: The key file, when signed_by was a URL or a file.
  type: str
  returned: success
"""
