"""``--image``: whose fault a probe that did not answer is, one rule for both launchers.

Before the timed part, the container checklist's probe runs in two places on each node:
bare, by the node's own Python (``nodetune_python``), and inside a container of the
image, after the image is found, pulled (podman/docker) or imported (pyxis). Over SSH
(:func:`nodetune.container.probe.probe_node`) and under Slurm
(:mod:`nodetune.container.slurm_probe`) the node is probed first, then the image, and a
probe that hung or ended without an answer is blamed by :data:`RULES` (the launchers' one
table, :mod:`nodetune.remote.executor`):

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

# The table and its two helpers are the launchers' one blame table
# (:mod:`nodetune.remote.executor`); the probe's stages are its rows.
from nodetune.remote.executor import RULES, Outcome, Stage, fault, hung

# The least time a step that may pull or import the image gets (a training image is
# gigabytes: podman/docker pull over SSH, pyxis's import in the container step).
IMPORT_S = 600.0

__all__ = ["IMPORT_S", "RULES", "Outcome", "Stage", "fault", "hung"]
