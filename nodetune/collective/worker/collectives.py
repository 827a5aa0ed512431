"""The collectives ``measure`` times: their buffers and calls, their capture in a CUDA
graph, the correctness check of their output, and nccl-tests' bandwidth arithmetic."""

from __future__ import annotations

from typing import Any


def bus_factor(collective: str, world: int) -> float:
    """nccl-tests' bus factor (src/<collective>.cu, <Collective>GetBw): 2(n-1)/n for
    all_reduce; (n-1)/n for all_gather, reduce_scatter and alltoall."""
    return (2.0 if collective == "all_reduce" else 1.0) * (world - 1) / world


def bandwidths(nbytes: int, seconds: float, world: int,
               collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in GB/s as nccl-tests reports them: the size's bytes / 1e9 / t
    (all_gather's received and reduce_scatter's sent bytes: the whole buffer), and that
    times the collective's bus factor."""
    algbw = nbytes / 1e9 / seconds
    return algbw, algbw * bus_factor(collective, world)


def elements(collective: str, count: int, world: int) -> int:
    """The float32 elements of a size's whole buffer: all_reduce's ``count``; the others'
    rounded down to a whole chunk per rank, as nccl-tests does (count / nranks * nranks)."""
    if collective == "all_reduce":
        return max(1, count)
    return max(1, count // world) * world


def _buffers(collective: str, count: int, world: int, torch: Any, device: Any) -> tuple[Any, Any]:
    """(input, output) of one size; all_reduce works in place on one buffer."""
    def zeros(n: int) -> Any:
        return torch.zeros(n, dtype=torch.float32, device=device)

    chunk = count // world
    if collective == "all_reduce":
        buf = zeros(count)
        return buf, buf
    if collective == "all_gather":
        return zeros(chunk), zeros(count)
    if collective == "reduce_scatter":
        return zeros(count), zeros(chunk)
    return zeros(count), zeros(count)  # alltoall: one chunk to each rank, one from each


def _op(collective: str, bufs: tuple[Any, Any], dist: Any) -> Any:
    """One call of the collective on ``bufs``."""
    inp, out = bufs
    if collective == "all_reduce":
        return lambda: dist.all_reduce(out)
    if collective == "all_gather":
        return lambda: dist.all_gather_into_tensor(out, inp)
    if collective == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(out, inp)
    return lambda: dist.all_to_all_single(out, inp)


def _capture(op: Any, warmup: int, iters: int, torch: Any) -> object:
    """Record ``iters`` calls of the collective ``op`` in one CUDA graph.

    Replaying it issues the same NCCL kernels back to back with no per-call
    Python/c10d cost, which is what nccl-tests' C loop approaches. The
    warmup runs eagerly on a side stream first, as CUDA graph capture requires.
    """
    cuda = torch.cuda
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for _ in range(max(warmup, 1)):
            op()
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for _ in range(iters):
            op()
    cuda.synchronize()
    return graph


def pattern(index: Any, rank: int) -> Any:
    """Rank ``rank``'s values at ``index``: small integers (1-8), so sums are exact in float32."""
    return index.add(3 * rank).remainder_(8).add_(1)


def expected(collective: str, index: Any, rank: int, world: int, torch: Any) -> Any:
    """What rank ``rank``'s output holds after one collective of ``pattern`` inputs over
    ``index``, the whole buffer's element indices."""
    chunk = index.numel() // world
    if collective == "all_gather":  # every rank's chunk 0, in rank order
        return torch.cat([pattern(index[:chunk], r) for r in range(world)])
    mine = index[rank * chunk:(rank + 1) * chunk]
    if collective == "reduce_scatter":  # the sum of every rank's chunk ``rank``
        return sum(pattern(mine, r) for r in range(world))
    if collective == "alltoall":  # chunk ``rank`` of each rank, in rank order
        return torch.cat([pattern(mine, r) for r in range(world)])
    return sum(pattern(index, r) for r in range(world))


def _check(collective: str, bufs: tuple[Any, Any], rank: int, world: int, dist: Any) -> int:
    """Load :func:`pattern` per rank, run the collective once, count wrong output elements
    over all ranks."""
    import torch

    inp, out = bufs
    whole = max(inp.numel(), out.numel())
    index = torch.arange(whole, dtype=torch.int32, device=out.device)
    inp.copy_(pattern(index[:inp.numel()], rank))
    _op(collective, bufs, dist)()
    want = expected(collective, index, rank, world, torch).to(out.dtype)
    wrong = torch.tensor([int((out != want).sum().item())], dtype=torch.int64, device=out.device)
    dist.all_reduce(wrong)
    return int(wrong.item())
