"""The node programs (the probe, the health reader, the sampler: stdlib-only files run with
``PYTHON -S -c SOURCE REQUEST_JSON``, nothing written to the node): their source as shipped
(:func:`embed`), and running one on its node (through the executor,
:class:`~nodetune.remote.executor.NodeRunner`) to take the one JSON document it prints
last (:func:`run`, read by :func:`last_object`)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from nodetune.ansible.content import content_dir
from nodetune.errors import LaunchError
from nodetune.remote.executor import Command, NodeRunner, Ran


def text(name: str) -> str:
    """The text of ``name``, a file of this package (``node_run.py``)."""
    return resources.files("nodetune.check").joinpath(name).read_text()


def fact_text() -> str:
    """The text of node_facts' fact script (``roles/node_facts/files/nodetune.fact``), as
    the role installs it: the probe, the health reader and the sampler carry it
    (``FACT_SOURCE``) and run it with :func:`nodetune.check.node_run.fact_script`."""
    return (content_dir() / "roles" / "node_facts" / "files" / "nodetune.fact").read_text()


# The line of a node program that imports the runner every tool goes through; on a node
# the module is made from node_run.py's text in its place (the package is not there).
RUN_IMPORT = "from nodetune.check import node_run  # noqa: E402 - node_program.embed\n"


def embed(name: str, **carried: str) -> str:
    """Node program ``name``'s source (``node_sample.py``) as it runs on a node: its import
    of :mod:`nodetune.check.node_run` replaced by that module made from its text, and each
    of ``carried`` (``SLOT=TEXT``) in its ``SLOT = ""`` line.

    Raises:
        ValueError: the program has no such import or slot (it would not run on a node).
    """
    out = text(name)
    inline = ('node_run = __import__("types").ModuleType("node_run")\n'
              f'exec(compile({text("node_run.py")!r}, "node_run.py", "exec"), '
              "node_run.__dict__)  # noqa: S102 - node_run.py\n")
    places = [(RUN_IMPORT, inline)] + [(f'\n{slot} = ""\n', f"\n{slot} = {value!r}\n")
                                       for slot, value in carried.items()]
    for place, value in places:
        if place not in out:
            raise ValueError(f"{name} has no line {place.strip()!r} to carry it")
        out = out.replace(place, value, 1)
    return out


def launch(node: NodeRunner, python: str, source: str, request: dict[str, Any], *,
           timeout: float) -> Ran:
    """Run ``source`` under ``python -S`` with ``request`` as its one argument: the programs
    are stdlib only, and a node Python's site-packages (a torch venv's .pth files) cost the
    Slurm health check tens of ms of CPU on every run.

    Raises:
        NodeTimeout: no answer within ``timeout``.
    """
    return node.run(Command([python, "-S", "-c", source, json.dumps(request)]),
                    timeout=timeout)


def last_object(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that starts with ``{``, read as a JSON object; None when
    there is no such line, it is not JSON, or it is JSON but not an object."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), "")
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def answer(res: Ran, *, python: str, mark: str, what: str, host: str,
           needs: str = "") -> dict[str, Any]:
    """The program's answer: the last stdout line that starts with ``{``, a JSON object
    whose ``mark`` is 1, from a run that exited 0.

    Raises:
        LaunchError: anything else, naming ``what`` ran under ``python``, its exit status
            and its last three lines of output (``needs``: what follows them).
    """
    doc = last_object(res.stdout)
    if res.exit_status != 0 or not isinstance(doc, dict) or doc.get(mark) != 1:
        detail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise LaunchError(f"{what} failed under {python} (exit {res.exit_status}: "
                          f"{' | '.join(detail) or 'no output'}){needs}", host=host)
    return doc


def run(node: NodeRunner, python: str, source: str, request: dict[str, Any], *,
        timeout: float, mark: str, what: str, host: str) -> dict[str, Any]:
    """:func:`launch` then :func:`answer`.

    Raises:
        LaunchError: its answer is not the program's.
        NodeTimeout: no answer within ``timeout``.
    """
    res = launch(node, python, source, request, timeout=timeout)
    return answer(res, python=python, mark=mark, what=what, host=host)
