"""Loaded by every Python process started with this folder on PYTHONPATH (benchmarks only):
records each child process's argv and its own CPU time (``os.wait4``'s rusage, which
includes the descendants it waited for) as one JSON line in $NODETUNE_RUSAGE_LOG."""

from __future__ import annotations

import json
import os
import subprocess
import time

_LOG = os.environ.get("NODETUNE_RUSAGE_LOG")
_ARGV: dict[int, list[str]] = {}
_T0: dict[int, float] = {}

if _LOG:
    _popen_init = subprocess.Popen.__init__
    _waitpid = os.waitpid

    def _init(self, args, *a, **kw):  # type: ignore[no-untyped-def]
        _popen_init(self, args, *a, **kw)
        _ARGV[self.pid] = [str(x) for x in (args if isinstance(args, (list, tuple))
                                           else [args])]
        _T0[self.pid] = time.perf_counter()

    def _waitpid4(pid, options):  # type: ignore[no-untyped-def]
        got, status, usage = os.wait4(pid, options)
        if got and got in _ARGV:
            with open(_LOG, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({
                    "parent": os.getpid(), "pid": got,
                    "argv": [a if len(a) < 200 else a[:60] + "..." for a in _ARGV.pop(got)],
                    "cpu_s": usage.ru_utime + usage.ru_stime,
                    "wall_s": time.perf_counter() - _T0.pop(got, time.perf_counter()),
                }) + "\n")
        return got, status

    subprocess.Popen.__init__ = _init  # type: ignore[method-assign]
    os.waitpid = _waitpid4
