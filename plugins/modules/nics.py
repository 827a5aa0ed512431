#!/usr/bin/python
"""List the node's network interfaces and RDMA devices (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nics
short_description: List the node's network interfaces and RDMA devices, read-only
author:
  - nodetune maintainers (@nodetune)
description:
  - Reads C(/sys/class/net) (name, link type, MTU, whether an RDMA device backs it) and
    C(/sys/class/infiniband) (each RDMA device and its port numbers). Changes nothing.
  - The input checks of net_mtu and nccl_config (and playbooks/inputs.yml, once for
    both) compare the interface and HCA names of the inventory with this answer.
options:
  sysfs_root: {type: path, default: /sys, description: Where /sys is (tests point it elsewhere).}
"""

EXAMPLES = r"""
- name: Read the node's interfaces and RDMA devices
  nodetune.cluster.nics:
  register: nics
"""

RETURN = r"""
interfaces:
  description: Interface name to its mtu, kind (ethernet, ipoib, loopback, other) and rdma.
  type: dict
  returned: success
rdma_devices:
  description: RDMA device name to the list of its port numbers.
  type: dict
  returned: success
"""


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel
    from ansible_collections.nodetune.cluster.plugins.module_utils.nics import (  # pylint: disable=import-outside-toplevel
        read_links,
        read_rdma_devices,
    )

    module = AnsibleModule(argument_spec={"sysfs_root": {"type": "path", "default": "/sys"}},
                           supports_check_mode=True)
    root = module.params["sysfs_root"]
    try:
        links = read_links(root)
    except OSError as exc:
        module.fail_json(msg=f"cannot list the network interfaces under {root}: {exc}")
    module.exit_json(changed=False, interfaces=links, rdma_devices=read_rdma_devices(root))


if __name__ == "__main__":
    main()
