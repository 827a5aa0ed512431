"""``--image``: whose fault a probe that did not answer is, one rule for both launchers.

Before the timed part, the container checklist's probe runs in two places on each node:
bare, by the node's own Python (``nodetune_python``), and inside a container of the
image, after the image is found, pulled (podman/docker) or imported (pyxis). Over SSH
(:func:`nodetune.container.probe.probe_node`) and under Slurm
(:mod:`nodetune.container.slurm_probe`) the node is probed first, then the image, and a
probe that hung or ended without an answer is blamed by :data:`RULES`:

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
neither convicts a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from nodetune.errors import (
    ImageError,
    ImageTimeout,
    LaunchError,
    NodeTimeout,
    NodetuneError,
)

# The least time a step that may pull or import the image gets (a training image is
# gigabytes: podman/docker pull over SSH, pyxis's import in the container step).
IMPORT_S = 600.0


class Stage(StrEnum):
    """Where the probe ran."""

    NODE = "node"            # the bare probe, by the node's own Python
    RUNTIME = "runtime"      # the container runtime itself
    IMAGE = "image"          # the image found, pulled or imported, its digest read
    CONTAINER = "container"  # the probe in a container of the image


class Outcome(StrEnum):
    """How it ended without an answer."""

    HUNG = "hung"      # did not end within its time
    FAILED = "failed"  # ended, with no answer


RULES: Mapping[tuple[Stage, Outcome], type[NodetuneError]] = {
    (Stage.NODE, Outcome.HUNG): NodeTimeout,
    (Stage.NODE, Outcome.FAILED): LaunchError,
    (Stage.RUNTIME, Outcome.HUNG): ImageTimeout,
    (Stage.RUNTIME, Outcome.FAILED): ImageError,
    (Stage.IMAGE, Outcome.HUNG): ImageTimeout,
    (Stage.IMAGE, Outcome.FAILED): ImageError,
    (Stage.CONTAINER, Outcome.HUNG): ImageTimeout,
    (Stage.CONTAINER, Outcome.FAILED): ImageError,
}


def fault(stage: Stage, outcome: Outcome, message: str, *, host: str | None) -> NodetuneError:
    """The error of a probe at ``stage`` that ended as ``outcome``, naming ``host``."""
    return RULES[(stage, outcome)](message, host=host)


def hung(stage: Stage, exc: NodeTimeout, what: str, *, host: str | None = None
         ) -> NodetuneError:
    """``exc`` (a step past its time) as the error its stage's rule gives, naming ``host``
    (else the host ``exc`` names); ``what``: the step, for the message."""
    return fault(stage, Outcome.HUNG, f"{what} did not end: {exc.message}",
                 host=host or exc.host)


__all__ = ["IMPORT_S", "RULES", "Outcome", "Stage", "fault", "hung"]
