"""``check --image --launcher slurm``: every node's ``container.*`` checklist inside the
training image, through the Slurm container support the inventory names
(``nodetune_container_runtime``: ``oci`` bundle or ``pyxis`` image), in the allocation of
the node-local check.

Once the node-local check's step has reported, the two short probe steps validate runs too
(:func:`nodetune.container.slurm_probe.probe_steps`: the probe on the node, then in the
container) run on every node, and :func:`~nodetune.container.slurm_probe.judge_node` judges
each node's lines by the same checklist as ``check --image`` over SSH. The node's own NCCL
(``container.nccl``) is the one its node-local check read (``software.nccl``): the NCCL the
node was checked with.

Results and exit codes are those of ``check --image`` over SSH: ``container.image`` and the
checklist added to the node's checks (a failure is exit 1); a bundle the node lacks, or an
image pyxis could not import, fails ``container.image`` (the rest skipped). What does
not answer is blamed by the probe's stages (:mod:`~nodetune.container.probe`), per
node: a container that does not answer is that node's error (exit 3) kept with its own
checks and not blamed on the node (nor is a container step that hangs, exit 4); a
node's own Python that cannot run the bare probe is that node's error (exit 3) and
blamed on it (Slurm may drain it under ``--drain-unreachable``), its own checks kept
beside it; every other node keeps its verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from nodetune.ansible.inventory import Host
from nodetune.check.model import NodeChecks, Status, with_error
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.container import slurm_probe as sp
from nodetune.errors import InputError, NodeTimeout, NodetuneError
from nodetune.measure.host_env import node_python
from nodetune.slurm.allocation import Allocation

Progress = Callable[[str, str], None]  # (node, message)


def node_nccl(checks: NodeChecks) -> str | None:
    """The NCCL version the node-local check read (its passing ``software.nccl``), else
    None."""
    found = checks.get("software.nccl")
    if found is None or found.status is not Status.PASS:
        return None
    return found.measured.removeprefix("NCCL ").strip() or None


def run_seconds(timeout: float) -> float:
    """The longest the two probe steps take."""
    return timeout + max(timeout, ct.IMPORT_S)


def with_image(alloc: Allocation, hosts: Sequence[Host], results: Mapping[str, NodeChecks],
               image: str, *, timeout: float, progress: Progress = lambda _n, _m: None
               ) -> dict[str, NodeChecks]:
    """``results`` with each node's ``container.*`` checks of ``image`` added (a node the
    node-local check could not check is left as it is)."""
    targets = [sp.Target(h, node_python(h)) for h in hosts]
    try:
        containers, bare, inside = sp.probe_steps(
            targets, alloc, image, timeout=timeout,
            progress=lambda m: progress("slurm", m))
    except NodeTimeout as exc:  # the image's step (ImageTimeout) is not the nodes' fault
        return {h.name: results[h.name] if results[h.name].error else with_error(
            results[h.name], exc) for h in hosts}
    out: dict[str, NodeChecks] = {}
    for t in targets:
        checks, name = results[t.name], alloc.names[t.name]
        if checks.error is not None:
            out[t.name] = checks
            continue
        try:
            p = sp.judge_node(t, containers[t.name], bare.lines.get(name, ()),
                              inside.lines.get(name, ()), bare.srun, inside.srun,
                              node={"nccl": node_nccl(checks)})
        except InputError:
            raise
        except NodetuneError as exc:  # this node's alone; the others keep their verdicts
            progress(t.name, f"not checked: {exc.message}")
            out[t.name] = with_error(checks, exc)
            continue
        progress(t.name, p.missing or sp.described(p))
        out[t.name] = dataclasses.replace(checks, results=(*checks.results, *cp.as_checks(p)))
    return out


__all__ = ["node_nccl", "run_seconds", "with_image"]
