"""The program nodetune uploads to each node: probe, launch guard, and the measurement.

Self-contained on purpose (stdlib + torch, Python >= 3.8): it is shipped to the node as
ONE file, ``nodetune_worker.py``, and run there by the node's own Python, without the
nodetune package. The modules of this package are that file's parts:
:func:`nodetune.collective.worker_source.worker_source` joins them, in its fixed order, into
the text uploaded (this docstring heads it), dropping the imports between them, which only
the package needs. Every machine-readable line it prints is a line of
:mod:`nodetune.measure.protocol`, which is uploaded beside it as ``nodetune_protocol.py``.

  serve   --master ADDR [--free-port]   import torch once, say what the node has (python,
                                        torch, GPUs, interface), then read the launch
                                        spec (one JSON line) on stdin and fork this
                                        node's ranks, each running ``measure``
  launch  [--remove-after S] -- CMD...  run CMD in its own session, stdin passed on; kill
                                        its process group when stdin closes or on
                                        SIGTERM/SIGINT/SIGHUP, then (after S seconds, in
                                        which the controller's own cleanup ends the
                                        guard) remove the run's temp dir, the worker's
                                        own, so that a node that froze and thawed after
                                        the controller gave up keeps nothing
  reap    TOKEN                         SIGKILL what carries NODETUNE_RUN_ID=TOKEN
  ras     [--addr H:P] [--timeout S]    ask NCCL's RAS on this node for its communicators'
                                        status (``nodetune_ras.py``, uploaded beside) and
                                        print it as one ``ras`` event; the controller runs
                                        it on rank 0's node when a timed NCCL phase stalls
  (serve first sweeps what earlier runs left on the node: the temp dirs and processes of
  runs whose launch guard is gone, found by the run id in each dir's ``run-id`` file)
  measure --sizes B,B,.. ...            one rank (RANK, WORLD_SIZE, MASTER_ADDR, ... set):
                                        a collective (--collective: all_reduce, all_gather,
                                        reduce_scatter or alltoall) timed like nccl-tests'
                                        <collective>_perf

One torch import per node: ``serve`` imports it and forks the ranks, which
inherit it, instead of a probe that imports torch and a torch.distributed.run
that imports it again. The parent never touches CUDA before the fork (GPUs are
counted through NVML), so the ranks can use it.

The parts, in the shipped file's order: ``common`` (the protocol, ``emit``, process
helpers), ``probe`` (what the node has), ``reaper`` (reap, sweep, run dirs), ``guard``
(``launch``), ``collectives`` (buffers, ops, CUDA graphs, correctness, bandwidth),
``measure`` (one rank's timed loop), ``cli`` (``serve``, its ranks, ``main``).
"""
