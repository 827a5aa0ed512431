"""``validate --all``: one collective across every selected node, one job-wide group.

Pairs do not load the spine; a group of every node does. The group is planned like a
pair (the same options and node settings, rank 0 the first host; the pass mark and
transport expectation the strictest of every node's) and measured by the same worker,
over SSH or as one srun step of the allocation. One group cannot say which node is
slow: a failure leaves every node unresolved (a fleet of pairs names it), a pass makes
every node good.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nodetune.ansible.inventory import Host
from nodetune.collective import datapath, marks
from nodetune.collective.plan import (
    NodePlan,
    Options,
    Pair,
    Plan,
    asked,
    plan_pair,
)
from nodetune.errors import InputError
from nodetune.measure.host_env import host_env, node_python


def plan_all(hosts: Sequence[Host], options: Options) -> Plan:
    """The plan of one group across ``hosts`` (at least two), checked before connecting.

    Raises:
        InputError: fewer than two hosts, or a bad option or inventory variable.
    """
    if len(hosts) < 2:
        raise InputError(f"--all needs at least two hosts; the selection has {len(hosts)}")
    first = plan_pair(Pair(hosts[0], hosts[1]), options)
    nodes = tuple(NodePlan(host=h, rank=rank, python=node_python(h), env=host_env(h),
                           data=datapath.request_for(h.name, h.vars))
                  for rank, h in enumerate(hosts))
    mark = marks.pass_mark(hosts, asked(options))  # the strictest of every node's, not the first's
    return dataclasses.replace(first, nodes=nodes, threshold=mark.threshold,
                               expect_transport=mark.expect, profile=mark.profile,
                               force_ring=mark.force_ring, notes=mark.notes)

