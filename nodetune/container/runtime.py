"""``--image``: the worker inside the site's training image, started the way training jobs are.

What a node runs is read from the inventory, checked for every host before any node is
touched (:func:`configs`), and turned into an argv here; every argv element is one
shell word (the SSH session quotes each), and each value is also checked against a
strict pattern, so nothing reaches a command line that the runtime would read twice.

Variables (per host, or group_vars):

``nodetune_container_runtime``
    ``podman`` (the default) or ``docker`` over SSH; ``pyxis`` (``srun --container-image``)
    or ``oci`` (Slurm's own ``srun --container``) under ``--launcher slurm``.
``nodetune_container_shm_size``
    ``--shm-size`` for the container (e.g. ``16g``); unset: ``--ipc host``.
``nodetune_container_python``
    the image's Python with torch (default ``python3``).
``nodetune_container_mounts``
    more bind mounts, ``SRC:DST[:ro]`` (absolute paths), e.g. a venv or a dataset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.measure.shm import min_shm  # the checklist's /dev/shm mark
from nodetune.remote.session import ENV_NAME, RUN_ID

VAR_RUNTIME = "nodetune_container_runtime"
VAR_SHM = "nodetune_container_shm_size"
VAR_PYTHON = "nodetune_container_python"
VAR_MOUNTS = "nodetune_container_mounts"
SSH_RUNTIMES = ("podman", "docker")
SLURM_RUNTIMES = ("pyxis", "oci")
RUNTIMES = SSH_RUNTIMES + SLURM_RUNTIMES
LABEL = "nodetune.run"      # the label carrying the run id (podman/docker ps --filter label=)
NAME_PREFIX = "nodetune-"   # container names: nodetune-<run id>-<rank>
# The least time a step that may pull or import the image gets (a training image is
# gigabytes: podman/docker pull over SSH, pyxis's import in the container step).
IMPORT_S = 600.0

# An OCI reference: [registry[:port]/]path[:tag][@digest]; no spaces, no shell or option chars.
# "/": an OCI bundle or a squashfs file; "#": pyxis's REGISTRY#IMAGE (enroot's form).
_IMAGE = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/:@+#-]{0,254}$")
_SHM = re.compile(r"^[1-9][0-9]{0,12}[bkmgBKMG]?$")
_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")
_DEVICE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Container:
    """How one host runs ``image`` (checked)."""

    host: str
    image: str
    runtime: str = "podman"
    shm_size: str | None = None     # None: --ipc host
    python: str = "python3"
    mounts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"image": self.image, "runtime": self.runtime,
                "ipc": "host" if self.shm_size is None else f"shm-size {self.shm_size}",
                "python": self.python, "mounts": list(self.mounts)}


def check_image(image: str) -> str:
    """``image`` if it is a plain OCI reference.

    Raises:
        InputError: spaces, shell characters, or a leading ``-`` (an option to the runtime).
    """
    if not _IMAGE.match(image):
        raise InputError(f"--image {image!r}: not an image reference "
                         "([registry/]name[:tag][@digest], no spaces or shell characters)")
    return image


def config(host: Host, image: str, *, launcher: str = "ssh") -> Container:
    """How ``host`` runs ``image``, from its inventory variables.

    Raises:
        InputError: a bad value, naming the host and the variable.
    """
    v = host.vars
    runtime = str(v.get(VAR_RUNTIME) or ("podman" if launcher == "ssh" else "pyxis")).strip()
    if runtime not in RUNTIMES:
        raise InputError(f"{VAR_RUNTIME} {runtime!r}: choose one of {', '.join(RUNTIMES)}",
                         host=host.name)
    allowed = SSH_RUNTIMES if launcher == "ssh" else SLURM_RUNTIMES
    if runtime not in allowed:
        raise InputError(f"{VAR_RUNTIME} {runtime!r} does not run under --launcher {launcher}"
                         f" (there: {', '.join(allowed)})", host=host.name)
    if "#" in image and runtime != "pyxis":
        raise InputError(f"--image {image!r}: REGISTRY#IMAGE is pyxis's form; {runtime} "
                         "takes registry/image", host=host.name)
    shm_raw = v.get(VAR_SHM)
    shm = None if shm_raw in (None, "") else str(shm_raw).strip()
    if shm is not None and not _SHM.match(shm):
        raise InputError(f"{VAR_SHM} {shm_raw!r}: a size such as 1g or 512m", host=host.name)
    python = str(v.get(VAR_PYTHON) or "python3")
    if not (_PATH.match(python) or re.match(r"^python3?(\.[0-9]+)?$", python)):
        raise InputError(f"{VAR_PYTHON} {python!r}: an absolute path or python3",
                         host=host.name)
    return Container(host=host.name, image=check_image(image), runtime=runtime,
                     shm_size=shm, python=python, mounts=_mounts(v.get(VAR_MOUNTS), host.name))


def _mounts(raw: object, host: str) -> tuple[str, ...]:
    if raw in (None, ""):
        return ()
    if not isinstance(raw, list | tuple):
        raise InputError(f"{VAR_MOUNTS} must be a list of SRC:DST[:ro]", host=host)
    out = []
    for item in raw:
        parts = str(item).split(":")
        if not (2 <= len(parts) <= 3 and all(_PATH.match(p) for p in parts[:2])
                and parts[2:] in ([], ["ro"], ["rw"])):
            raise InputError(f"{VAR_MOUNTS}: {item!r} is not SRC:DST[:ro] with absolute paths",
                             host=host)
        out.append(str(item))
    return tuple(out)


def configs(hosts: Sequence[Host], image: str | None, *, launcher: str = "ssh"
            ) -> dict[str, Container]:
    """Every host's :class:`Container` (empty without ``--image``), checked up front.

    Raises:
        InputError: the first bad value, naming its host and variable.
    """
    if image is None:
        return {}
    check_image(image)
    out = {h.name: config(h, image, launcher=launcher) for h in hosts}
    for h in hosts:
        min_shm(h)  # the checklist's /dev/shm mark: bad input before any node is contacted
    return out


def check_request(hosts: Sequence[Host], image: str | None, *, launcher: str) -> None:
    """``validate --image`` as asked: every host's variables, before any node is touched.

    Raises:
        InputError: a bad value (host and variable named); under ``--launcher slurm``, a
            runtime or mounts that differ between hosts (one step runs every node of a
            pair in one container set-up), a shm size (the runtime's own there), or
            ``oci`` with an image that is no bundle path.
    """
    if image is None:
        return
    found = configs(hosts, image, launcher=launcher)
    if launcher == "ssh":
        return
    first = next(iter(found.values()), None)
    for c in found.values():
        assert first is not None
        if c.shm_size is not None:
            raise InputError(f"{VAR_SHM} is podman's and docker's: under --launcher slurm "
                             "/dev/shm is the host's (pyxis) or the OCI bundle's "  # noqa: S108 - words, no file
                             "(config.json)", host=c.host)
        if (c.runtime, c.mounts) != (first.runtime, first.mounts):
            raise InputError(f"{VAR_RUNTIME} and {VAR_MOUNTS} must be the same on every host "
                             f"under --launcher slurm ({c.host}: {c.runtime}, {first.host}: "
                             f"{first.runtime}): one srun step starts them all", host=c.host)
        if c.runtime == "oci" and not _PATH.match(c.image):
            raise InputError(f"--image {c.image!r}: Slurm's --container takes the absolute "
                             f"path of an OCI bundle on the nodes ({VAR_RUNTIME} oci)",
                             host=c.host)


# What ``srun --help`` lists when the cluster has the runtime: pyxis's SPANK options, or
# Slurm's own --container (Slurm 21.08 and later).
HELP_FLAGS = {"pyxis": "--container-image", "oci": "--container"}


def lacks_runtime(srun_help: str, runtime: str) -> str | None:
    """Why ``srun --help`` (on the controller) shows the cluster lacks ``runtime``, else
    None."""
    flag = HELP_FLAGS[runtime]
    if re.search(rf"(?m)^\s*(-\w,\s*)?{re.escape(flag)}[=\s]", srun_help):
        return None
    what = "the pyxis plugin" if runtime == "pyxis" else "Slurm's OCI container support"
    return (f"{VAR_RUNTIME} {runtime}: srun --help lists no {flag}, so this cluster lacks "
            f"{what}; choose the runtime it has, or --launcher ssh with podman or docker")


def name(run_id: str, rank: int, *, probe: bool = False) -> str:
    """The container's name: the run id, so the run's cleanup finds what it left."""
    if not RUN_ID.match(run_id):
        raise ValueError(f"bad run id {run_id!r}")
    return f"{NAME_PREFIX}{run_id}-{'probe' if probe else 'rank'}{rank}"


def _env_args(env: Mapping[str, str], flag: str) -> list[str]:
    out: list[str] = []
    for key, value in env.items():
        if not ENV_NAME.match(key) or "\0" in value:
            raise ValueError(f"bad environment entry {key!r}")
        out += [flag, f"{key}={value}"]
    return out


def device_args(rdma_devices: Sequence[str]) -> list[str]:
    """The RDMA character devices (``/dev/infiniband/*``) and the locked memory they need."""
    out: list[str] = []
    for dev in rdma_devices:
        if not _DEVICE.match(dev):
            raise ValueError(f"bad RDMA device name {dev!r}")
        out += ["--device", f"/dev/infiniband/{dev}"]
    return [*out, "--ulimit", "memlock=-1:-1", "--cap-add", "IPC_LOCK"] if out else out


def run_argv(c: Container, argv: Sequence[str], *, run_id: str, rank: int,
             workdir: str | None, env: Mapping[str, str], gpus: bool,
             rdma_devices: Sequence[str] = (), probe: bool = False) -> list[str]:
    """``podman run`` / ``docker run`` of ``argv`` in ``c.image``, as a training job runs it:
    the GPUs through the toolkit, the host's network, IPC (or ``--shm-size``), the RDMA
    devices, the worker directory read-only, ``env`` with ``-e``; removed when it ends."""
    if c.runtime not in SSH_RUNTIMES:
        raise ValueError(f"{c.runtime} does not run over SSH")
    if workdir is not None and not _PATH.match(workdir):
        raise ValueError(f"bad work directory {workdir!r}")
    out = [c.runtime, "run", "--rm", *([] if probe else ["-i"]),
           "--name", name(run_id, rank, probe=probe), "--label", f"{LABEL}={run_id}",
           "--network", "host", "--pull", "never"]
    out += ["--ipc", "host"] if c.shm_size is None else ["--shm-size", c.shm_size]
    if gpus:  # the container toolkit: CDI for podman, the nvidia runtime hook for docker
        out += ["--device", "nvidia.com/gpu=all"] if c.runtime == "podman" else ["--gpus", "all"]
    out += device_args(rdma_devices)
    if workdir is not None:
        out += ["-v", f"{workdir}:{workdir}:ro", "-w", workdir]
    for mount in c.mounts:
        out += ["-v", mount]
    # SSH_CONNECTION from the runtime's own environment: the worker names the SSH interface
    out += [*_env_args(env, "-e"), "-e", "SSH_CONNECTION"]
    return [*out, c.image, *argv]  # the image cannot pass for an option: check_image


def srun_args(c: Container, *, workdir: str, env: Mapping[str, str]) -> list[str]:
    """The ``srun`` options that run a step in ``c.image`` under Slurm: pyxis
    (``--container-image``, enroot) or Slurm's OCI support (``--container``, a bundle path).

    The GPUs and the RDMA devices come with the step's allocation (pyxis/enroot hooks,
    the OCI runtime's config); the environment is the step's (``--export``)."""
    if c.runtime == "pyxis":
        mounts = [f"{workdir}:{workdir}:ro", *c.mounts]
        out = ["--container-image", c.image, "--container-mounts", ",".join(mounts),
               "--container-workdir", workdir, "--no-container-remap-root"]
    elif c.runtime == "oci":
        if not _PATH.match(c.image):
            raise ValueError(f"Slurm's --container takes an OCI bundle path, not {c.image!r}")
        out = ["--container", c.image, f"--chdir={workdir}"]
    else:
        raise ValueError(f"{c.runtime} does not run under Slurm")
    if env:  # srun --export splits on commas: a value with one cannot pass that way
        bad = [k for k, v in env.items() if not ENV_NAME.match(k) or "," in v or "\0" in v]
        if bad:
            raise ValueError(f"cannot pass {bad[0]!r} through srun --export")
        out.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in env.items()))
    return out


def image_argv(c: Container, *, pull: bool) -> list[str]:
    """``image exists`` (podman) / ``image inspect`` (docker), or ``pull``."""
    if pull:
        return [c.runtime, "pull", "--quiet", c.image]
    if c.runtime == "podman":
        return ["podman", "image", "exists", c.image]
    return ["docker", "image", "inspect", "--format", "{{.Id}}", c.image]


def digest_argv(c: Container) -> list[str]:
    """The image's digest (the registry's, else its id)."""
    fmt = "{{.Digest}} {{.Id}}" if c.runtime == "podman" else "{{.RepoDigests}} {{.Id}}"
    return [c.runtime, "image", "inspect", "--format", fmt, c.image]


def rm_argv(c: Container, run_id: str, rank: int) -> list[str]:
    """Remove what this run left on the node of ``rank`` (``rm -f`` by name; absent names
    are no error)."""
    names = [name(run_id, rank), name(run_id, rank, probe=True)]
    if c.runtime == "podman":  # -t 0: no stop timeout (the worker's PID 1 has no handler)
        return ["podman", "rm", "-f", "-t", "0", "--ignore", *names]
    return ["sh", "-c", 'docker rm -f "$@" >/dev/null 2>&1; exit 0', "rm", *names]


def left_argv(c: Container, run_id: str) -> list[str]:
    """The containers of this run still there (names, one a line)."""
    return [c.runtime, "ps", "-a", "--filter", f"label={LABEL}={run_id}",
            "--format", "{{.Names}}"]
