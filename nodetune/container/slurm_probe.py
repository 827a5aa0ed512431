"""``--image`` under ``--launcher slurm``: the worker's steps run in the training image
through Slurm's own container support, chosen by ``nodetune_container_runtime``:

``pyxis``  ``srun --container-image IMAGE --container-mounts RUN_DIR:RUN_DIR:ro`` (enroot)
``oci``    ``srun --container BUNDLE`` (Slurm's OCI support: oci.conf on the nodes, an OCI
           bundle at the same path on each; its config.json must bind the run's directory,
           under /tmp)

Before the timed part, two short steps of the allocation: one on the nodes themselves
(their own torch NCCL, /dev/shm and RDMA devices; and, for ``oci``, the bundle's
presence and its config.json's sha256 as the digest), and one inside the container
support (the same probe, by the image's Python). The checklist of
:mod:`~nodetune.container.probe` judges them, with the same named reasons and
exit codes as over SSH, and what does not answer is blamed by the same rule (the
probe's stages, which that module explains): a missing image or bundle, or a container
step that does not answer or hangs (an image pyxis cannot import), is the image's (exit
3 or 4 naming the node, not drained for it); a node's own Python that cannot run the
bare probe, or a bare step that hangs, is the node's; a failed checklist is exit 1.

A cluster that lacks the chosen runtime is refused on the controller before any
allocation, from ``srun --help`` (:func:`~nodetune.container.runtime.lacks_runtime`).

``validate`` runs the steps before its pair's step
(:func:`nodetune.validate.slurm_pair.preflight`), ``check`` after the node-local check's
(:mod:`nodetune.check.slurm_image`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.errors import ImageCheckFailed, ImageError, InputError
from nodetune.measure.shm import min_shm
from nodetune.remote import ssh
from nodetune.remote.executor import Command, Outcome, Stage, fault
from nodetune.remote.session import RUN_VAR
from nodetune.slurm.allocation import Allocation, StepOutput
from nodetune.slurm.commands import NodeCommand
from nodetune.slurm.executor import SrunExecutor

PROBE_NAME = "nodetune_container_probe.py"  # staged beside the worker (sbcast)
BUNDLE_MARK = "NODETUNE_BUNDLE "
# On the node itself: the bundle's presence and digest (oci), then the probe.
_BARE = ('if [ -n "$1" ]; then if [ -f "$1/config.json" ]; then '
         f'echo "{BUNDLE_MARK}sha256:$(sha256sum < "$1/config.json" | cut -d" " -f1)"; '
         f'else echo "{BUNDLE_MARK}missing"; fi; fi; exec "$2" "$3"')
_TAIL = 300


def staged_files(image: str | None) -> dict[str, bytes]:
    """What ``--image`` adds to the files staged on every node."""
    return {} if image is None else {PROBE_NAME: cp.PROBE.encode()}


def require_runtime(session: ssh.Session, hosts: Sequence[Host], image: str, *,
                    where: str) -> None:
    """Refuse, before any allocation, a runtime that ``srun --help`` on the controller
    shows the cluster lacks.

    Raises:
        InputError: the runtime's srun option is not listed (exit 2).
    """
    runtime = next(iter(ct.configs(hosts, image, launcher="slurm").values())).runtime
    shown = session.run(["srun", "--help"], timeout=30)
    why = ct.lacks_runtime(shown.stdout + shown.stderr, runtime)
    if why is not None:
        raise InputError(f"{why} (srun on {where})", host=hosts[0].name if hosts else None)


def srun_options(containers: Mapping[str, ct.Container], workdir: str) -> list[str]:
    """The srun options of every container step of the run (the hosts' runtimes and
    mounts are the same: :func:`~nodetune.container.runtime.check_request`)."""
    first = next(iter(containers.values()))
    return ct.srun_args(first, workdir=workdir, env={})


def bare_command(python: str, c: ct.Container) -> NodeCommand:
    """The node's own probe (and, for ``oci``, its bundle's presence and digest)."""
    bundle = c.image if c.runtime == "oci" else ""
    return NodeCommand(env={}, argv=["sh", "-c", _BARE, "sh", bundle, python, PROBE_NAME])


def inside_command(c: ct.Container, run_id: str) -> NodeCommand:
    """The probe by the image's Python, in the container the step starts."""
    return NodeCommand(env={RUN_VAR: run_id}, argv=[c.python, PROBE_NAME])


def _bundle(lines: Sequence[str]) -> str | None:
    for line in lines:
        if line.startswith(BUNDLE_MARK):
            return line[len(BUNDLE_MARK):].strip()
    return None


def _said(lines: Sequence[str], srun: Sequence[str]) -> str:
    text = " | ".join(ln.strip() for ln in [*srun, *lines] if ln.strip())
    return text[-_TAIL:] or "no output"


@dataclass(frozen=True, slots=True)
class Target:
    """One node the probe steps run on: its inventory host and the Python that reads the
    node's own facts (``nodetune_python``)."""

    host: Host
    python: str

    @property
    def name(self) -> str:
        """The inventory name of the host."""
        return self.host.name


# pyxis's own words (its slurm_error) when enroot cannot import the image.
_NOT_IMPORTED = re.compile(r"pyxis: failed to import docker image")


def judge_node(target: Target, c: ct.Container, bare: Sequence[str], inside: Sequence[str],
               srun_bare: Sequence[str] = (), srun_inside: Sequence[str] = (), *,
               node: Mapping[str, Any] | None = None) -> cp.Probed:
    """One node's :class:`~nodetune.container.probe.Probed` from its lines of the
    two steps; ``node``: facts of the node known otherwise, which replace the bare step's
    (``check``: the node-local check's NCCL). An OCI bundle the node lacks, or an image
    pyxis could not import, is :attr:`~nodetune.container.probe.Probed.missing`.

    Raises:
        LaunchError: the node's own Python did not run the bare probe (the node's, exit 3).
        ImageError: its container did not answer the probe (the image's, exit 3, naming
            the node; the probe's stages, :mod:`~nodetune.container.probe`).
    """
    mine, theirs = list(bare), list(inside)
    digest = _bundle(mine)
    if c.runtime == "oci" and digest in (None, "missing"):
        return cp.Probed(host=target.name, container=c, missing=(
            f"OCI bundle {c.image} is not on the node (no config.json)"))
    facts = cp.parse("\n".join(mine))
    if facts is None:  # the node's own Python, outside any container
        raise fault(Stage.NODE, Outcome.FAILED,
                    f"{target.python} did not run the container probe on the node "
                    f"({_said(mine, srun_bare)})", host=target.name)
    got = cp.parse("\n".join(theirs))
    if got is None and c.runtime == "pyxis" and any(
            _NOT_IMPORTED.search(line) for line in [*theirs, *srun_inside]):
        return cp.Probed(host=target.name, container=c, missing=(
            f"pyxis could not import image {c.image} ({_said(theirs, srun_inside)})"))
    if got is None:
        raise fault(Stage.CONTAINER, Outcome.FAILED,
                    f"srun {c.runtime} step in {c.image} did not answer the probe "
                    f"({_said(theirs, srun_inside)})", host=target.name)
    facts = {**facts, **(node or {})}
    shm, source = min_shm(target.host)
    return cp.Probed(host=target.name, container=c, digest=digest, node=facts, inside=got,
                     results=cp.judge(facts, got, min_shm=shm, min_shm_source=source))


def judge_nodes(nodes: Sequence[Target], alloc: Allocation,
                containers: Mapping[str, ct.Container],
                bare: Mapping[str, Sequence[str]], inside: Mapping[str, Sequence[str]],
                srun_bare: Sequence[str] = (), srun_inside: Sequence[str] = ()
                ) -> dict[str, cp.Probed]:
    """Each node's :class:`~nodetune.container.probe.Probed` from the two steps'
    lines (by Slurm name), in the nodes' order (``validate``: a missing image ends the run).

    Raises:
        ImageError: a bundle or image missing on a node, or a container that did not
            answer its probe (exit 3, naming the node, not blamed).
        LaunchError: a node's own Python did not run the bare probe (exit 3, the node's).
    """
    out: dict[str, cp.Probed] = {}
    for n in nodes:
        slurm = alloc.names[n.name]
        p = judge_node(n, containers[n.name], bare.get(slurm, ()), inside.get(slurm, ()),
                       srun_bare, srun_inside)
        if p.missing:
            raise ImageError(p.missing, host=n.name)
        out[n.name] = p
    return out


def failed(probed: Mapping[str, cp.Probed]) -> ImageCheckFailed | None:
    """The checklist's failure (every failing node's reasons; the first one named)."""
    bad = [(name, p) for name, p in probed.items() if p.failures]
    if not bad:
        return None
    text = "; ".join(f"{name}: " + "; ".join(r.message for r in p.failures)
                     for name, p in bad)
    return ImageCheckFailed(text if len(bad) > 1 else
                            "; ".join(r.message for r in bad[0][1].failures), host=bad[0][0])


def probe_steps(nodes: Sequence[Target], alloc: Allocation, image: str, *, timeout: float,
                progress: Callable[[str], None] = lambda _m: None
                ) -> tuple[dict[str, ct.Container], StepOutput, StepOutput]:
    """The checklist's two short steps on every node: the probe bare, then in the container
    (``progress``: what is probed, before the steps start).

    Raises:
        NodeTimeout: the bare step did not end within ``timeout`` (exit 4, the nodes').
        ImageTimeout: the container step did not end in time (exit 4, the image's: no
            node blamed; the probe's stages, :mod:`~nodetune.container.probe`).
    """
    containers = {n.name: ct.config(n.host, image, launcher="slurm") for n in nodes}
    first = next(iter(containers.values()))
    names = {n.name: alloc.names[n.name] for n in nodes}
    progress(f"{first.runtime}: image {image} and its container "
             f"on {', '.join(names.values())}")
    bare = SrunExecutor(alloc).run_step(
        {n.name: _command(bare_command(n.python, containers[n.name])) for n in nodes},
        name="nodetune-probe", timeout=timeout, stage=Stage.NODE,
        what="the container probe on the nodes")
    # the bare step answered: what hangs in the container's is the image's
    inside = SrunExecutor(alloc, container=srun_options(containers, alloc.workdir)).run_step(
        {n.name: _command(inside_command(containers[n.name], alloc.run_id)) for n in nodes},
        name="nodetune-probe-image", timeout=max(timeout, ct.IMPORT_S),  # pyxis may import it
        stage=Stage.CONTAINER, what=f"the container probe in {image}")
    return containers, bare, inside


def _command(c: NodeCommand) -> Command:
    return Command(argv=c.argv, env=c.env)


def described(p: cp.Probed) -> str:
    """What the image is, in one line (its digest, torch, CUDA, NCCL, /dev/shm)."""
    return (f"image {p.digest or '?'}: torch {p.inside.get('torch')}, CUDA "
            f"{p.inside.get('cuda') or '-'}, NCCL {p.inside.get('nccl') or '-'}, /dev/shm "
            f"{p.to_dict()['shm']}")


def section(probed: Mapping[str, cp.Probed]) -> dict[str, Any]:
    """report.json's ``container``: each node's."""
    return {name: p.to_dict() for name, p in probed.items()}


__all__ = ["PROBE_NAME", "Target", "bare_command", "described", "failed", "inside_command",
           "judge_node", "judge_nodes", "probe_steps", "require_runtime", "section",
           "srun_options", "staged_files"]
