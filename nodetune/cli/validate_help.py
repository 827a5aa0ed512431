"""`nodetune validate --help`'s epilog: examples, the verdict in brief, the threshold
profiles (from :data:`nodetune.measure.thresholds.PROFILES`) and where the rest is."""

from __future__ import annotations

from nodetune.measure import thresholds
from nodetune.measure.sweep import human_bytes


def _profiles_help() -> str:
    return "\n".join(f"  {p.name:<22} {p.min_busbw_gbps:>6g} GB/s at {human_bytes(p.at_bytes)}"
                     f", {p.algorithm}" for p in thresholds.PROFILES.values())


EPILOG = f"""\b
Examples:
  nodetune validate inventory/prod --limit 'node-a,node-b' --profile h100-2node-aws-p5
  nodetune validate inventory/prod --limit 'node-a,node-b' --min-busbw 380 --expect-transport ib
  nodetune validate inventory/prod --profile h100-2node-aws-p5 --plan   # a fleet: its pairs
  nodetune validate inventory/prod --drain --dry-run --junit v.xml --prom-textfile v.prom

\b
Two hosts: PASS when every rank got the right sums at every size, busbw at the
largest size meets the threshold, and the transport is what --expect-transport
asks for. More hosts: every node is judged good, bad, unresolved or unreachable
in two rounds of pairs. Exit 0 pass, 1 fail (a node bad), 2 bad input,
3 infrastructure, 4 timeout.

\b
Threshold profiles:
{_profiles_help()}

\b
The fabric interface, inventory variables, fleet rounds, Slurm (--drain,
--resume), vaulted inventories and reports (--junit, --prom-textfile,
--report, history) are described in docs/validate.md."""
