"""The lab's node image: a Debian root filesystem with systemd, sshd and Python, built once."""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from nodetune.errors import InputError, LabError
from nodetune.lab.config import IMAGE, NODE_PACKAGES, SUITE, SUITES, Say
from nodetune.lab.podman import require_root as _require_root
from nodetune.lab.podman import run as _podman

log = logging.getLogger(__name__)


def image_present(image: str = IMAGE) -> bool:
    """Whether the node image is in podman's image store."""
    return _podman("image", "exists", image, check=False).returncode == 0


def image_for(suite: str) -> str:
    """The node image's name for a Debian suite (``localhost/nodetune-node:trixie``)."""
    if suite not in SUITES:
        raise InputError(f"no node image for Debian suite {suite!r}; one of {', '.join(SUITES)}")
    return f"localhost/nodetune-node:{suite}"


def build_image(*, base_image: str | None = None, progress: Say = lambda _m: None,
                rebuild: bool = False, suite: str = SUITE) -> str:
    """Build the node image for a Debian suite unless it exists.

    With ``base_image`` (a registry image such as ``debian:12``) the packages are
    added with apt in a ``podman build``; without one the root filesystem is
    made by ``debootstrap`` from Debian's package mirror, so no container
    registry is needed.

    Raises:
        InputError: ``suite`` is not one of SUITES.
        LabError: debootstrap or podman failed.
    """
    image = image_for(suite)
    _require_root()
    if image_present(image) and not rebuild:
        return image
    with tempfile.TemporaryDirectory(prefix="nodetune-image-") as tmp:
        context = Path(tmp)
        if base_image:
            progress(f"building {image} from {base_image}")
            pkgs = NODE_PACKAGES.replace(",", " ")
            (context / "Containerfile").write_text(
                f"FROM {base_image}\n"
                "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                f"--no-install-recommends {pkgs} && rm -rf /var/lib/apt/lists/*\n"
                + _FINISH_RUN + "CMD [\"/sbin/init\"]\n"
            )
        else:
            debootstrap = shutil.which("debootstrap")
            if debootstrap is None:
                raise LabError(
                    "no base image given and debootstrap is missing: `apt-get install "
                    "debootstrap`, or pass --base-image debian:12 if a registry is reachable"
                )
            rootfs = context / "rootfs"
            progress(f"debootstrap {suite} (about a minute, once; the image is reused)")
            proc = subprocess.run(
                [debootstrap, "--variant=minbase", f"--include={NODE_PACKAGES}", suite,
                 str(rootfs)], capture_output=True, text=True, check=False, timeout=1200,
            )
            if proc.returncode != 0:
                raise LabError(f"debootstrap failed: {proc.stdout[-400:]}{proc.stderr[-400:]}")
            progress("importing the root filesystem into podman")
            base = f"{image}-rootfs"
            tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True,
                                 check=True)
            _podman("import", "-q", "-", base, input_=tar.stdout)
            shutil.rmtree(rootfs, ignore_errors=True)
            (context / "Containerfile").write_text(
                f"FROM {base}\n" + _FINISH_RUN + "CMD [\"/sbin/init\"]\n"
            )
        progress(f"finishing {image}")
        _podman("build", "-q", "-t", image, str(context), timeout=1200)
    return image


# Per-container SSH host keys (generated at first boot, never baked into the
# image), no password logins, and no services a lab node does not need.
_FINISH_RUN = (
    "RUN rm -f /etc/ssh/ssh_host_* && mkdir -p /etc/systemd/system/ssh.service.d /root/.ssh "
    "&& printf '[Service]\\nExecStartPre=\\nExecStartPre=/usr/bin/ssh-keygen -A\\n"
    "ExecStartPre=/usr/sbin/sshd -t\\n' "
    "> /etc/systemd/system/ssh.service.d/hostkeys.conf "
    "&& printf 'PasswordAuthentication no\\nPermitRootLogin prohibit-password\\n' "
    "> /etc/ssh/sshd_config.d/nodetune-lab.conf "
    "&& chmod 700 /root/.ssh && systemctl enable ssh "
    "&& systemctl mask getty.target console-getty.service\n"
)
