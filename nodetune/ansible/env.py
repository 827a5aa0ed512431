"""The environment ansible-playbook runs in: whose ansible.cfg, which roles, host-key checking.

nodetune honours the operator's Ansible configuration, found the way Ansible
finds it (``ANSIBLE_CONFIG``, ``./ansible.cfg``, ``~/.ansible.cfg``,
``/etc/ansible/ansible.cfg``), and falls back to the bundled ``ansible.cfg``
only when the operator has none. It owns two things whatever that
configuration says: its roles come first on the roles path, and SSH host keys
are checked unless the operator turns that off explicitly in the environment.

Each run also gets SSH master connections of its own (:func:`ssh_masters`):
Ansible names its ControlPath after host, port and user only, in one directory
shared by every run, so a run would otherwise ride a master connection an
earlier run opened with other SSH settings (another ProxyJump, known_hosts or
host key), and hang on it once that path is gone.
"""

from __future__ import annotations

import configparser
import contextlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodetune.ansible import truth
from nodetune.ansible.vault import env_paths as vault_env_paths
from nodetune.errors import PlaybookError

log = logging.getLogger(__name__)

HOST_KEY_ENV = "ANSIBLE_HOST_KEY_CHECKING"
# A key given twice in one YAML mapping (hosts.yml, group_vars) is bad input, not a
# warning after which Ansible keeps the last value; nodetune's in-process read agrees.
DUPLICATE_KEY_ENV = "ANSIBLE_DUPLICATE_YAML_DICT_KEY"
CONTROL_PATH_ENV = "ANSIBLE_SSH_CONTROL_PATH_DIR"
LOCAL_TMP_ENV = "ANSIBLE_LOCAL_TEMP"


@dataclass(frozen=True, slots=True)
class AnsibleConfig:
    """The ansible.cfg in force for a run and where it came from."""

    path: Path
    source: str  # "ANSIBLE_CONFIG", "./ansible.cfg", "~/.ansible.cfg", "/etc/ansible", "bundled"

    def describe(self) -> str:
        """One line for ``apply -v`` and the run record."""
        return f"{self.path} ({self.source})"


def find_config(*, bundled: Path, environ: Mapping[str, str] | None = None,
                cwd: Path | None = None, home: Path | None = None,
                system: Path = Path("/etc/ansible/ansible.cfg")) -> AnsibleConfig:
    """The ansible.cfg Ansible would read from the operator's shell, else the bundled one.

    Same order as Ansible's ``find_ini_config_file``: ``$ANSIBLE_CONFIG`` (a
    file, or a directory holding ansible.cfg), ``./ansible.cfg`` unless the
    current directory is world-writable, ``~/.ansible.cfg``, then
    ``/etc/ansible/ansible.cfg``. The current directory is resolved here
    because ansible-playbook itself runs from the playbook's directory.
    """
    env = os.environ if environ is None else environ
    candidates: list[tuple[Path, str]] = []
    if env.get("ANSIBLE_CONFIG"):
        given = Path(os.path.expandvars(env["ANSIBLE_CONFIG"])).expanduser()
        candidates.append((given / "ansible.cfg" if given.is_dir() else given,
                           "ANSIBLE_CONFIG"))
    here = Path.cwd() if cwd is None else cwd
    if not _world_writable(here):
        candidates.append((here / "ansible.cfg", "./ansible.cfg"))
    candidates.append(((Path.home() if home is None else home) / ".ansible.cfg",
                       "~/.ansible.cfg"))
    candidates.append((system, "/etc/ansible"))
    for path, source in candidates:
        if path.is_file():
            return AnsibleConfig(path=path.resolve(), source=source)
    return AnsibleConfig(path=bundled.resolve(), source="bundled")


def _world_writable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True


def roles_path(config: AnsibleConfig, *, bundled_roles: Path,
               environ: Mapping[str, str] | None = None) -> str:
    """nodetune's roles first, then the operator's own roles path (env, else config)."""
    env = os.environ if environ is None else environ
    theirs = env.get("ANSIBLE_ROLES_PATH", "")
    if not theirs and config.source != "bundled":
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read(config.path)
            theirs = parser.get("defaults", "roles_path", fallback="")
        except configparser.Error as exc:
            log.warning("%s: cannot read roles_path (%s); using nodetune's roles only",
                        config.path, exc)
    base = config.path.parent
    parts = [str(bundled_roles.resolve())]
    for raw in theirs.split(os.pathsep):
        if not raw.strip():
            continue
        expanded = Path(os.path.expandvars(raw.strip())).expanduser()
        resolved = str(expanded if expanded.is_absolute() else (base / expanded).resolve())
        if resolved not in parts:
            parts.append(resolved)
    return os.pathsep.join(parts)


def host_key_checking(environ: Mapping[str, str] | None = None) -> bool:
    """Whether SSH host keys are checked: always, unless the environment says false."""
    env = os.environ if environ is None else environ
    return env.get(HOST_KEY_ENV, "true").strip().lower() not in truth.BOOLEANS_FALSE


def playbook_env(*, content: Path, environ: Mapping[str, str] | None = None,
                 cwd: Path | None = None, home: Path | None = None) -> tuple[
                     dict[str, str], AnsibleConfig]:
    """Variables nodetune sets for ansible-playbook, and the config they put in force.

    ansible-runner sets ``ANSIBLE_HOST_KEY_CHECKING=False`` unless the
    environment sets it, which would override any ansible.cfg; nodetune sets it
    to True unless the operator exported it (the explicit opt-out, e.g. for a
    throw-away lab). A duplicated YAML key is an error; the vault password files
    of the environment keep meaning the operator's paths.
    """
    env = os.environ if environ is None else environ
    config = find_config(bundled=content / "ansible.cfg", environ=env, cwd=cwd, home=home)
    checking = host_key_checking(env)
    if not checking:
        log.warning("SSH host key checking is OFF: %s=%s is set in the environment",
                    HOST_KEY_ENV, env[HOST_KEY_ENV])
    out = {
        "ANSIBLE_CONFIG": str(config.path),
        "ANSIBLE_ROLES_PATH": roles_path(config, bundled_roles=content / "roles", environ=env),
        HOST_KEY_ENV: "True" if checking else "False",
        DUPLICATE_KEY_ENV: "error",
        **vault_env_paths(env, cwd),
    }
    return out, config


def operator_setting(config: AnsibleConfig, *, env_names: tuple[str, ...], section: str,
                     keys: tuple[str, ...],
                     environ: Mapping[str, str] | None = None) -> str | None:
    """What the operator set for one of Ansible's settings, in the environment (``env_names``)
    or in their ansible.cfg (``section``, ``keys``); None where they did not."""
    env = os.environ if environ is None else environ
    for name in env_names:
        if env.get(name):
            return env[name]
    if config.source == "bundled":
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(config.path)
    except configparser.Error:
        return None
    for key in keys:
        value = parser.get(section, key, fallback="").strip()
        if value:
            return value
    return None


def operator_control_path(config: AnsibleConfig, *,
                          environ: Mapping[str, str] | None = None) -> str | None:
    """Where the operator put Ansible's SSH ControlPath, if they chose (env or ansible.cfg)."""
    return operator_setting(config, env_names=(CONTROL_PATH_ENV, "ANSIBLE_SSH_CONTROL_PATH"),
                            section="ssh_connection", keys=("control_path_dir", "control_path"),
                            environ=environ)


def local_tmp(config: AnsibleConfig, private: Path, *,
              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for one run whose Ansible temporary directory on the controller
    (local_tmp) is inside ``private``, the run's own directory that nodetune removes however
    the run ends. Ansible removes its own only when it exits by itself; a stopped run
    (Ctrl-C, --timeout: ansible-runner kills ansible-playbook's group) would leave it in
    ~/.ansible/tmp for good. An operator who set local_tmp keeps theirs."""
    theirs = operator_setting(config, env_names=(LOCAL_TMP_ENV,), section="defaults",
                              keys=("local_tmp",), environ=environ)
    if theirs is not None:
        log.info("Ansible's local_tmp from the operator's configuration: %s", theirs)
        return {}
    return {LOCAL_TMP_ENV: str(private / "local")}


@contextlib.contextmanager
def ssh_masters(config: AnsibleConfig, *,
                environ: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Environment for one run whose SSH master connections are its own; closed at the end.

    Ansible's ControlPath is ``<control_path_dir>/<hash of host, port, user>``
    with ControlPersist=60s, so any run within a minute of another would reuse
    that run's connection to the same address, whatever its own ProxyJump,
    ProxyCommand, known_hosts or host key say. A directory of this run's own
    keeps multiplexing within the run; its masters are told to exit when the run
    ends. An operator who set control_path_dir/control_path keeps theirs.
    """
    theirs = operator_control_path(config, environ=environ)
    if theirs is not None:
        log.info("SSH ControlPath from the operator's configuration: %s", theirs)
        yield {}
        return
    # A short path (mkdtemp: 0700, private): OpenSSH refuses sockets over ~100 characters.
    cpdir = Path(tempfile.mkdtemp(prefix="nodetune-cp-"))
    try:
        yield {CONTROL_PATH_ENV: str(cpdir)}
    finally:
        close_masters(cpdir)
        shutil.rmtree(cpdir, ignore_errors=True)


def close_masters(cpdir: Path) -> None:
    """Ask every SSH master listening in ``cpdir`` to exit (``ssh -O exit``)."""
    try:
        sockets = [p for p in cpdir.iterdir() if p.is_socket()]
    except OSError:
        return
    for sock in sockets:
        try:
            subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={sock}", "nodetune-master"],
                           capture_output=True, timeout=10, check=False,
                           stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("could not close SSH master %s: %s", sock, exc)


def tool_path() -> str:
    """The PATH on which a run finds ansible-playbook: this Python's own bin, then the caller's.

    nodetune installed in a virtual environment brings its ansible-core there; installed
    elsewhere (``pip install --target``, a system Python), ansible-playbook is where PATH
    says. Every ansible command of a run is looked up on this one PATH.
    """
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def ansible_playbook(path: str) -> str:
    """The ansible-playbook a run uses: the first on ``path`` (see :func:`tool_path`).

    Raises:
        PlaybookError: none is on that PATH.
    """
    found = shutil.which("ansible-playbook", path=path)
    if not found:
        raise PlaybookError(f"ansible-playbook is not installed on PATH ({path}); "
                            "install nodetune with its ansible-core (pip install nodetune)")
    return found
