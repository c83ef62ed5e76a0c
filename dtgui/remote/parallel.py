"""Doing one thing on many machines at once: the one place that fans work out over threads.

Work on machines waits on the network, not on the CPU, so every machine gets a thread of its
own (up to `MAX_THREADS`); one slow or unreachable machine costs its own timeout, not the sum.
A failure of one machine is that machine's result: the others still finish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_THREADS = 16


def each(fn: Callable[[T], R], items: Sequence[T], *,
         name: str = "dtgui-each") -> list[R | Exception]:
    """`fn(item)` for every item at once; in item order, the value or the exception raised
    (`Exception` only: an interrupt still interrupts). Blocks until every call returned."""
    def guarded(item: T) -> R | Exception:
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - the item's own result
            return exc

    if not items:
        return []
    if len(items) == 1:  # no thread for one machine (a run on one machine stays as fast)
        return [guarded(items[0])]
    with ThreadPoolExecutor(min(MAX_THREADS, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(guarded, items))


def each_value(fn: Callable[[T], R], items: Sequence[T], *, name: str = "dtgui-each") -> list[R]:
    """`fn(item)` for every item at once, in item order; the first exception (in item order)
    is raised once every call has returned. For work whose failures are results already."""
    results = each(fn, items, name=name)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return [r for r in results if not isinstance(r, Exception)]
