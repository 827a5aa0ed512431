"""One step on every node of a run at once, whatever launcher reached them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

N = TypeVar("N")
T = TypeVar("T")


def on_each_node(fn: Callable[[N], T], nodes: Sequence[N]) -> list[T]:
    """Run ``fn`` on every node at once; re-raise the first node's error (by rank)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = [pool.submit(fn, n) for n in nodes]
        errors = [f.exception() for f in futures]
    for exc in errors:
        if exc is not None:
            raise exc
    return [f.result() for f in futures]


__all__ = ["on_each_node"]
