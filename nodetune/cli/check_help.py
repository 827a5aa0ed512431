"""`nodetune check --help`'s epilog: examples, every check and what it reads (the list from
the checks' own modules: :mod:`nodetune.check.listing`), exit codes, and the options the
verbs share (Slurm, vault, reports)."""

from __future__ import annotations

from nodetune.check import listing
from nodetune.cli import input_opts, report_opts, slurm_opts

EPILOG = f"""\b
Examples:
  nodetune check inventory/prod
  nodetune check inventory/prod --limit 'gpu-a0*' --json > check.json
  nodetune check inventory/gpu-local          # ansible_connection: local

\b
Checks (each: pass, warn, fail, skip or unknown: its tool hung or crashed; with
measured and expected values, the source of the expectation and, when it fails, the
action: none < re-run < reset-gpu < restart-fabric-manager < reboot < service):
{listing.text()}
Without --sample the counters count from the node's previous check; the report gives that
check's time ("window") and the sampled window's start, length and samples.
Expectations are the roles' defaults under the inventory's group_vars/host_vars,
as `nodetune apply` would use them. Hosts: those of gpu_nodes (or
-e nodetune_hosts=GROUP) under --limit, as for every verb; a missing or
empty group is refused (exit 2).

\b
Inventory variables read (besides the roles'):
{listing.variables_text()}

\b
--launcher slurm: every node checks itself (nodetune-healthcheck --report, from
the slurm_healthcheck role) in one srun step of one exclusive salloc of the
nodes, run from nodetune_slurm_controller; no SSH to the nodes; the same report.
With --image, the container.* checks follow in the same allocation, in the
image through pyxis or Slurm's OCI support (nodetune_container_runtime).
--drain drains no node for the image's faults (container.*): such a node is
skipped, saying so; a node's own faults in the same run still drain it.

\b
Exit: 0 no check failed (warnings allowed), 1 a check failed, 2 bad input
(nothing is contacted), 3 a node could not be reached or probed, 4 a node timed out,
5 nothing failed but a check could not be assessed (not drained without --drain-unknown).

{slurm_opts.HELP}
{slurm_opts.BUSY_HELP}
{input_opts.HELP}
{report_opts.HELP}"""
