"""Before the timed part of ``--image``: the image is on the node (or pulled), and a short
probe inside it meets the seeds' checklist for NCCL in containers.

The checklist (NCCL's troubleshooting guide, "Docker" and "Shared memory" sections,
read 2026-11-27: a container's ``/dev/shm`` defaults to 64 MB, ``--shm-size=1g`` or
``--ipc=host`` fix it; InfiniBand needs the verbs library and the ``/dev/infiniband``
devices inside the container):

``container.shm``        the container's ``/dev/shm`` is at least ``nodetune_min_shm`` (1G)
``container.rdma``       every RDMA device of the node is visible inside (where it has some)
``container.libibverbs`` the image has libibverbs (where the node has RDMA)
``container.nccl``       the image's NCCL is the node's own (its torch's, as ``check`` reads it)
``container.torch``      the image's Python imports torch

Used by ``validate --image`` (a failure ends the run before the timed part, exit 1) and
``check --image`` (one result each).

The probe runs in two places on each node: bare, by the node's own Python
(``nodetune_python``), and inside a container of the image, after the image is found,
pulled (podman/docker) or imported (pyxis). Over SSH (:func:`probe_node`) and under
Slurm (:mod:`nodetune.container.slurm_probe`) the node is probed first, then the image,
and a probe that hung or ended without an answer is blamed by the launchers' one table,
:data:`~nodetune.remote.executor.RULES`, whose stages are the probe's:

==========  ===========================  =================  =================  ========
stage       what runs                    hung               no answer          convicts
==========  ===========================  =================  =================  ========
node        the bare probe, by the       NodeTimeout        LaunchError        the node
            node's own Python            (exit 4)           (exit 3)
runtime     the container runtime        ImageTimeout       ImageError         no node
            itself (not installed)       (exit 4)           (exit 3)
image       image lookup, pull, pyxis    ImageTimeout       ImageError         no node
            import, digest               (exit 4)           (exit 3)
container   the probe in the container,  ImageTimeout       ImageError         no node
            by the image's Python        (exit 4)           (exit 3)
==========  ===========================  =================  =================  ========

The node answered the bare probe before any image step ran, so what hangs or fails
after it is the image's, its registry's or the runtime's: infrastructure, named on the
node where it happened, but no node is convicted (``blames_node`` is False: no drain,
``--drain-unreachable`` included). A node whose own Python cannot run the bare probe,
or whose bare probe hangs, is the node's fault, and ``--drain-unreachable`` may drain
it. An image that is not on the node and cannot be pulled or imported, or a missing OCI
bundle, is ``container.image`` failing (``check``) or :class:`ImageError` (``validate``);
a container that answers but fails the checklist is :class:`ImageCheckFailed` (exit 1);
neither convicts a node. A pull, or pyxis's import, gets at least
:data:`~nodetune.container.runtime.IMPORT_S`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nodetune.container import runtime as ct
from nodetune.measure.result import CheckResult, HelpLines, Status, failed, passed, skipped
from nodetune.measure.shm import DEFAULT_MIN_SHM, SHM, SHM_SOURCE, VAR_MIN_SHM, human
from nodetune.remote.executor import Command, Outcome, Stage, fault
from nodetune.remote.session import RUN_VAR, CommandResult, new_run_id
from nodetune.remote.ssh_executor import SshExecutor

MARK = "NODETUNE_CONTAINER "
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("container.*",
     "with --image: the image is on the node (or pulled: container.image), and",
     "its container, started as validate --image starts it, has /dev/shm >=",
     "nodetune_min_shm, the node's RDMA devices and libibverbs (where it has",
     "RDMA), torch, and the node's NCCL (container.shm/rdma/libibverbs/torch/nccl)"),
)
# Read by the node's own Python and by the image's: the same facts, on both sides.
PROBE = r"""
import ctypes, json, os
out = {"gpu": os.path.exists("/dev/nvidiactl")}
try:
    st = os.statvfs("/dev/shm")
    out["shm"] = st.f_frsize * st.f_blocks
except OSError as exc:
    out["shm_error"] = str(exc)
d = "/dev/infiniband"
out["rdma"] = sorted(n for n in os.listdir(d) if n.startswith(("uverbs", "rdma_cm"))) \
    if os.path.isdir(d) else []
try:
    ctypes.CDLL("libibverbs.so.1")
    out["ibverbs"] = True
except OSError:
    out["ibverbs"] = False
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    if torch.version.cuda:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print("NODETUNE_CONTAINER " + json.dumps(out), flush=True)
"""
CHECKS = ("container.torch", "container.shm", "container.rdma", "container.libibverbs",
          "container.nccl")
NCCL_SOURCE = "the node's torch NCCL (nodetune_python), as check reads it"
RDMA_SOURCE = "NCCL troubleshooting guide, InfiniBand in containers (read 2026-11-27)"


@dataclass(frozen=True, slots=True)
class Probed:
    """What the node and its container reported, and the checklist's results."""

    host: str
    container: ct.Container
    digest: str | None = None
    node: dict[str, Any] = field(default_factory=dict)
    inside: dict[str, Any] = field(default_factory=dict)
    results: tuple[CheckResult, ...] = ()
    missing: str | None = None   # the image is not on the node and could not be pulled

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.status is Status.FAIL)

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``container[NODE]``."""
        shm = self.inside.get("shm")
        return {**self.container.to_dict(), "digest": self.digest,
                "torch": self.inside.get("torch"), "cuda": self.inside.get("cuda"),
                "nccl": self.inside.get("nccl"), "node_nccl": self.node.get("nccl"),
                "shm_bytes": shm, "shm": human(int(shm)) if isinstance(shm, int) else None,
                "rdma_devices": self.inside.get("rdma"), "libibverbs": self.inside.get("ibverbs"),
                "missing": self.missing, "checks": [r.to_dict() for r in self.results]}


def parse(stdout: str) -> dict[str, Any] | None:
    """The probe's JSON line (None: it printed none)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                doc = json.loads(line[len(MARK):])
            except json.JSONDecodeError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _digest(inspected: str) -> str | None:
    """The registry digest from ``image inspect``'s "DIGEST ID" line, else the image id
    (docker prints ``[]`` for an image pulled from no registry, podman an empty digest)."""
    words = [w.strip("[]") for w in inspected.split()]
    words = [w for w in words if w]
    return words[0] if words else None


def judge(node: dict[str, Any], inside: dict[str, Any], *, min_shm: int = DEFAULT_MIN_SHM,
          min_shm_source: str = SHM_SOURCE) -> tuple[CheckResult, ...]:
    """The checklist from the node's facts and the container's (pure)."""
    out: list[CheckResult] = []
    if inside.get("torch_error") or not inside.get("torch"):
        out.append(failed("container.torch", "not importable", "torch importable",
                          ct.VAR_PYTHON, f"the image's Python cannot import torch "
                          f"({inside.get('torch_error', 'no answer')})"))
    elif node.get("gpu") and not inside.get("cuda"):
        # A CPU build cannot use the node's GPUs: the training job would not either.
        out.append(failed("container.torch", f"torch {inside['torch']} (CPU build)",
                          "torch with CUDA (the node has GPUs)", ct.VAR_PYTHON,
                          f"the image's torch {inside['torch']} is a CPU build; the node has "
                          "GPUs"))
    else:
        out.append(passed("container.torch", f"torch {inside['torch']} "
                          f"({inside.get('cuda') or 'CPU build'})", "torch importable",
                          ct.VAR_PYTHON))
    shm = inside.get("shm")
    want = f">= {human(min_shm)}"
    if not isinstance(shm, int):
        out.append(failed("container.shm", "unreadable", want, min_shm_source,
                          f"{SHM} inside the container: {inside.get('shm_error', '?')}"))
    elif shm < min_shm:
        out.append(failed("container.shm", human(shm), want, min_shm_source,
                          f"{SHM} inside the container is {human(shm)}, below "
                          f"{human(min_shm)}: run it with --ipc host or set "
                          f"{ct.VAR_SHM} (e.g. 16g)"))
    else:
        out.append(passed("container.shm", human(shm), want, min_shm_source))
    host_rdma = list(node.get("rdma") or [])
    seen = list(inside.get("rdma") or [])
    if not host_rdma:
        out.append(skipped("container.rdma", "the node has no RDMA device"))
        out.append(skipped("container.libibverbs", "the node has no RDMA device"))
    else:
        lost = sorted(set(host_rdma) - set(seen))
        out.append(failed("container.rdma", ", ".join(seen) or "none", ", ".join(host_rdma),
                          RDMA_SOURCE, f"RDMA device(s) of the node missing inside the "
                          f"container: {', '.join(lost)}") if lost else
                   passed("container.rdma", ", ".join(seen), ", ".join(host_rdma), RDMA_SOURCE))
        out.append(passed("container.libibverbs", "libibverbs.so.1", "present", RDMA_SOURCE)
                   if inside.get("ibverbs") else
                   failed("container.libibverbs", "missing", "present", RDMA_SOURCE,
                          "the image has no libibverbs.so.1: NCCL falls back to sockets"))
    mine, theirs = inside.get("nccl"), node.get("nccl")
    if not mine or not theirs:
        side = "the image's torch" if not mine else "the node's torch (nodetune_python)"
        out.append(skipped("container.nccl", f"no NCCL version from {side} (a CPU build?)",
                           source=NCCL_SOURCE))
    elif mine != theirs:
        out.append(failed("container.nccl", str(mine), str(theirs), NCCL_SOURCE,
                          f"the image's NCCL {mine} differs from the node's {theirs}, which "
                          "the node was validated with"))
    else:
        out.append(passed("container.nccl", str(mine), str(theirs), NCCL_SOURCE))
    return tuple(out)


def _run(executor: SshExecutor, host: str, argv: list[str], *, stage: Stage, what: str,
         timeout: float) -> CommandResult:
    """``argv`` on ``host``, through ``executor``; past ``timeout`` it is the error that
    :data:`~nodetune.remote.executor.RULES` gives ``stage`` (the node's, or the image's)."""
    return executor.run_one(host, Command(argv), timeout=timeout, stage=stage, what=what)


def probe_node(executor: SshExecutor, c: ct.Container, *, node_python: str, run_id: str,
               rank: int, timeout: float, workdir: str | None = None,
               min_shm: int = DEFAULT_MIN_SHM, min_shm_source: str = SHM_SOURCE) -> Probed:
    """Probe the node itself (``c.host``, through the session ``executor`` holds for it),
    make sure the image is on it (pull it if not), then probe a container of it and judge
    the checklist. A missing image is :attr:`Probed.missing`. What did not answer is
    blamed by the probe's stages (above; the node probed first, as under Slurm).

    Raises:
        LaunchError: the node's Python did not run the bare probe (the node's).
        NodeTimeout: the bare probe did not end within ``timeout`` (the node's).
        ImageError: the runtime is not there, or the container did not answer.
        ImageTimeout: a runtime command (image lookup, pull, inspect, the container's
            probe) did not end in time (the image's: no node blamed).
    """
    host = c.host
    bare = _run(executor, host, [node_python, "-c", PROBE], stage=Stage.NODE,
                what=f"the container probe by {node_python} on the node", timeout=timeout)
    node = parse(bare.stdout)
    if node is None:
        raise fault(Stage.NODE, Outcome.FAILED,
                    f"{node_python} did not run the container probe on the node "
                    f"(exit {bare.exit_status}: {bare.stderr.strip()[-300:]})", host=host)
    here = _run(executor, host, ct.image_argv(c, pull=False), stage=Stage.IMAGE,
                what=f"{c.runtime} looking up image {c.image}", timeout=timeout)
    if here.exit_status == 127:
        raise fault(Stage.RUNTIME, Outcome.FAILED,
                    f"{c.runtime} is not installed (set {ct.VAR_RUNTIME})", host=host)
    if here.exit_status != 0:
        pulled = _run(executor, host, ct.image_argv(c, pull=True), stage=Stage.IMAGE,
                      what=f"{c.runtime} pull {c.image}", timeout=max(timeout, ct.IMPORT_S))
        if pulled.exit_status != 0:
            why = (pulled.stderr or pulled.stdout).strip().splitlines()[-1:] or ["no output"]
            return Probed(host=host, container=c, missing=(
                f"image {c.image} is not on the node and {c.runtime} pull failed: {why[0]}"))
    inspected = _run(executor, host, ct.digest_argv(c), stage=Stage.IMAGE,
                     what=f"{c.runtime} image inspect {c.image}", timeout=timeout)
    digest = _digest(inspected.stdout)
    argv = ct.run_argv(c, [c.python, "-c", PROBE], run_id=run_id, rank=rank, workdir=workdir,
                       env={RUN_VAR: run_id}, gpus=bool(node.get("gpu")),
                       rdma_devices=node.get("rdma") or (), probe=True)
    ran = _run(executor, host, argv, stage=Stage.CONTAINER,
               what=f"the container probe in {c.image}", timeout=timeout)
    inside = parse(ran.stdout)
    if inside is None:
        raise fault(Stage.CONTAINER, Outcome.FAILED,
                    f"{c.runtime} run {c.image} did not answer the probe (exit "
                    f"{ran.exit_status}: {(ran.stderr or ran.stdout).strip()[-300:]})",
                    host=host)
    return Probed(host=host, container=c, digest=digest, node=node, inside=inside,
                  results=judge(node, inside, min_shm=min_shm, min_shm_source=min_shm_source))


def check_results(executor: SshExecutor, c: ct.Container, *, node_python: str, timeout: float,
                  min_shm: int = DEFAULT_MIN_SHM, min_shm_source: str = SHM_SOURCE
                  ) -> tuple[CheckResult, ...]:
    """``check --image``: ``container.image`` and the checklist, as check results, on
    ``c.host`` through ``executor`` (check's own, over the node's session); the probe's
    container is removed whatever happens.

    Raises:
        NodetuneError: as :func:`probe_node` (the node's or the image's, by the probe's
            stages).
    """
    run_id = new_run_id()
    try:
        p = probe_node(executor, c, node_python=node_python, run_id=run_id, rank=0,
                       timeout=timeout, min_shm=min_shm, min_shm_source=min_shm_source)
    finally:
        _run(executor, c.host, ct.rm_argv(c, run_id, 0), stage=Stage.RUNTIME,
             what=f"{c.runtime} rm of the probe's container", timeout=timeout)
    return as_checks(p)


def as_checks(p: Probed) -> tuple[CheckResult, ...]:
    """``check --image``'s results of one node: ``container.image`` and the checklist
    (skipped where the image is not on the node)."""
    if p.missing:
        return (image_result(p), *(skipped(n, "the image is not on the node")
                                   for n in CHECKS))
    return (image_result(p), *p.results)


def image_result(p: Probed) -> CheckResult:
    """``container.image``: on the node (its digest), or why not."""
    if p.missing:
        return failed("container.image", "missing", p.container.image, "--image", p.missing)
    return passed("container.image", p.digest or "?", p.container.image, "--image")


__all__ = ["PROBE", "VAR_MIN_SHM", "Probed", "as_checks", "image_result", "judge", "parse",
           "probe_node"]
