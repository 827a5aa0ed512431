"""One exception tree for nodetune; every error carries a message a person can act on."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Exit statuses shared by every verb (README.md, "Exit codes")."""

    OK = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    INFRASTRUCTURE = 3
    TIMEOUT = 4
    NOT_ASSESSED = 5  # nothing failed, but a check could not be assessed (a probe hung)


class NodetuneError(Exception):
    """Base of every error nodetune raises on purpose."""

    exit_code: ExitCode = ExitCode.INFRASTRUCTURE
    # Whether the named host is to blame (a drain may follow); False where the fault is
    # in what the host was asked to run (a training image), not in the host.
    blames_node: bool = True

    def __init__(self, message: str, *, host: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.host = host
        # Sections of report.json found before the failure (``container``: the checklist
        # of --image), which the run record keeps.
        self.sections: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.host}: {self.message}" if self.host else self.message


class InputError(NodetuneError):
    """Bad input from the user: options, variables, files."""

    exit_code = ExitCode.BAD_INPUT


class InventoryError(InputError):
    """The inventory is missing, unparsable, empty, or a pattern matches nothing."""


class PlaybookError(NodetuneError):
    """ansible-runner could not run the playbook at all (not a host failing a task)."""


class SSHError(NodetuneError):
    """A node could not be reached, authenticated or commanded over SSH."""


class LaunchError(NodetuneError):
    """A remote process could not be started, or its prerequisites are missing on the node."""


class CheckFailed(NodetuneError):
    """A node fails a check that ends the run before anything is measured (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED


class ImageCheckFailed(CheckFailed):
    """``--image``: the training image's container fails the checklist on a node (exit 1).
    The image is at fault, not the node: no node is drained for it."""

    blames_node = False


class LabError(NodetuneError):
    """The local podman lab could not be created, inspected or removed."""


class NodeTimeout(NodetuneError):
    """A remote step did not finish within its time limit."""

    exit_code = ExitCode.TIMEOUT


class ImageTimeout(NodeTimeout):
    """``--image``: the container's probe step (an image import, a hung container) did not
    end in time: exit 4, naming the node, which is not drained for it."""

    blames_node = False


class SlurmError(NodetuneError):
    """Slurm could not be read or changed (no controller, scontrol failed)."""


class RecordError(NodetuneError):
    """The run record could not be written (a full or failing disk under the runs folder).

    ``document`` is the record that was to be written, so that ``--json`` can
    still print it.
    """

    def __init__(self, message: str, *, document: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.document = document


class ImageError(LaunchError):
    """``--image``: the image cannot be used on a node (missing and not pullable, no such
    runtime, its container does not run the probe): exit 3, naming the node, which is not
    drained for it."""

    blames_node = False
