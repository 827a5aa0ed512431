"""A molecule run with a state directory of its own, removed when the run ends.

molecule keeps a scenario's state (created, prepared, converged) in an "ephemeral
directory" named after the checkout folder's name and the scenario,
``$HOME/.ansible/tmp/molecule.<hash of the folder's name>.<scenario>``, and keeps it after
the run. Two checkouts in folders of one name (/a/nodetune and /b/nodetune, or a clone made
again in the same place) share it: a later run can find the instances "already prepared"
and skip prepare. Every molecule run of the suite (tests/molecule/runs.py,
scripts/ansible-next.sh) gets a fresh one instead (``MOLECULE_EPHEMERAL_DIRECTORY``), a
temporary directory removed once the run has ended, failed or been stopped. The run's HOME
is a folder inside it: the podman driver creates and destroys its instances in async tasks
on this machine whose job files it puts in ``$HOME/.ansible_async`` (its own ``set_fact``
of ``ansible_async_dir``, which no environment variable overrides) and keeps there for good,
and Ansible's own ``~/.ansible/tmp`` goes with them. (scripts/ansible-next.sh gives its
2.21 pass a HOME of its own the same way.)

    python -m tests.molecule.state_dir -- ARGV...   run ARGV (molecule ...) with a state
                                                    directory of its own; ARGV's exit status
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

ENV = "MOLECULE_EPHEMERAL_DIRECTORY"
PREFIX = "nodetune-molecule-"
# Passed on to the run, which ends (or cleans up) first; the directory goes after it.
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def own(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """``env`` with ``MOLECULE_EPHEMERAL_DIRECTORY`` set to a fresh temporary directory, and
    HOME to a folder inside it; removed when the block ends, however it ends."""
    path = tempfile.mkdtemp(prefix=PREFIX)
    try:
        home = os.path.join(path, "home")
        os.mkdir(home)
        yield {**env, ENV: path, "HOME": home}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(argv: list[str]) -> int:
    """Run ``argv`` with a state directory of its own, in a process group of its own;
    SIGTERM, SIGINT and SIGHUP are passed on to it (once each: a terminal's Ctrl-C reaches
    this process's group, not the run's), and the directory is removed once it has ended.
    Its exit status (128 + the signal's number where a signal ended it, as a shell says)."""
    started: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []  # signals that came before the run started: passed on then

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        if started:
            started[0].send_signal(signum)
        else:
            pending.append(signum)

    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    with own(os.environ) as env:
        started.append(subprocess.Popen(argv, env=env, process_group=0))
        for signum in pending:
            started[0].send_signal(signum)
        code = started[0].wait()
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"] and len(argv) > 1:
        return run(argv[1:])
    print(__doc__.rsplit("\n\n", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
